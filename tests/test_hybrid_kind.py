"""The hybrid scorer: the oracle where the VLM does not score, the VLM where it does, frames only
for the envs the VLM scores; and a run trains with it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from rmtl.reward.kinds.hybrid import HybridKind
from rmtl.reward.kinds.oracle import OracleKind
from rmtl.reward.shaping import RewardShaper
from rmtl.tasks import get_task

TASK = get_task("fetch_lift")
K = len(TASK.micro_tasks.names)


class FakeVLM:
    """A VLM kind's parts: embeddings are the first 4 state values, scores their fixed projections."""

    views, resolution, add_env_reward, num_phases = ("a", "b"), 32, True, K

    def __init__(self):
        self.rendered: list[list[int]] = []
        self.w = np.random.default_rng(0).normal(size=(4, K))

    def source(self, states, render):
        render(np.arange(len(states)))
        return np.repeat(states[:, None, :4], 2, axis=1)

    def scorer(self, embeddings):
        return SimpleNamespace(aggregate=embeddings.mean(axis=1) @ self.w)


def _states(n, seed):
    rng = np.random.default_rng(seed)
    s = np.zeros((n, 25))
    s[:, 3:6] = [1.3, 0.75, 0.42489]
    s[:, 0:3] = s[:, 3:6] + rng.normal(0, 0.1, (n, 3))
    s[:, 6:9] = s[:, 3:6] - s[:, 0:3]
    return s


def _run(kind, steps=6, n=4):
    shaper = RewardShaper(n, num_phases=K)
    rendered = []
    out = []
    for t in range(steps):
        s = _states(n, t)
        phases = np.asarray(TASK.phases(s), dtype=np.int64)
        out.append(kind.step(s, phases, shaper, lambda idx: rendered.append(np.asarray(idx).tolist())).reward)
    return np.array(out), rendered


def test_a_hybrid_with_the_oracle_everywhere_is_the_oracle():
    oracle = OracleKind(TASK.oracle_progress, K)
    hybrid = HybridKind(FakeVLM(), OracleKind(TASK.oracle_progress, K), vlm_phases=())
    expected, _ = _run(oracle)
    got, rendered = _run(hybrid)
    np.testing.assert_array_equal(got, expected)
    assert rendered == []  # nothing rendered when the VLM scores no micro-task


def test_the_vlm_scores_only_its_micro_tasks_and_renders_only_those_envs():
    vlm = FakeVLM()
    grasp = TASK.micro_tasks.names.index("grasp")
    hybrid = HybridKind(vlm, OracleKind(TASK.oracle_progress, K), vlm_phases=(grasp,))
    s = _states(6, 1)
    phases = np.array([0, grasp, 1, grasp, 0, 2 if grasp != 2 else 1])
    rendered = []
    step = hybrid.step(s, phases, RewardShaper(6, num_phases=K), lambda idx: rendered.append(np.asarray(idx).tolist()))
    assert rendered == [np.flatnonzero(phases == grasp).tolist()]
    scores = step.terms["scores"]
    by_vlm = phases == grasp
    np.testing.assert_allclose(scores[by_vlm], (s[by_vlm, :4] @ vlm.w).astype(np.float32), rtol=1e-5)
    np.testing.assert_allclose(scores[~by_vlm], OracleKind(TASK.oracle_progress, K).scores(s[~by_vlm]), rtol=1e-5)


@pytest.mark.slow
def test_a_stage1_run_trains_on_a_hybrid(random_tiny_vlm, tmp_path):
    from rmtl.train.config import stage1_config
    from rmtl.train.stage1 import train_stage1

    cfg = stage1_config(
        "rmtl", n_envs=2, n_steps=16, batch_size=16, n_epochs=1, total_timesteps=32, checkpoint_every=32,
        eval_every=0, eval_episodes=1, progress_bar=False, torch_threads=1, output_dir=str(tmp_path / "run"),
        vec_env="dummy", env={"views": ("wide_view", "close_up"), "resolution": 64, "max_episode_steps": 16},
        reward={"kind": "hybrid", "vlm_micro_tasks": ["grasp"], "model": "rmtl-fetch-tiny@random",
                "views": ("wide_view", "close_up"), "resolution": 64, "batch_size": 16})
    run = train_stage1(cfg, vlm=random_tiny_vlm)
    record = json.loads((run / "run.json").read_text())
    assert record["config"]["reward"]["kind"] == "hybrid"
    assert record["config"]["reward"]["vlm_micro_tasks"] == ["grasp"]

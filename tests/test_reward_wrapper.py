"""End to end: the VLM reward kind through RewardVecEnv on a DummyVecEnv of FetchPickAndLiftEnv, in
training's own env stack (rmtl.train.envs.train_env, rmtl.reward.vec_env, rmtl.reward.kinds.vlm)."""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

from rmtl.tasks.fetch_lift.env import EnvConfig, FetchPickAndLiftEnv
from rmtl.errors import ConfigError
from rmtl.tasks.fetch_lift.phases import rule_phase
from conftest import reward_stack
from rmtl.reward import PhasedScorer, RewardConfig, RewardVecEnv, VLMEmbeddingSource
from rmtl.reward.kinds.vlm import VLMKind
from rmtl.reward.phase import RulePhaseSelector
from rmtl.reward.prompts import embed_prompts
from rmtl.tasks import get_task
from rmtl.vlm.testing import TINY_NAME, tiny_vlm

RULE = RulePhaseSelector(get_task().phases)
"""Pick-and-lift's phase rule (the distance rule), as training builds it from the task."""

VIEWS = ("wide_view", "close_up")
ENV_CFG = EnvConfig.make(max_episode_steps=3, views=VIEWS, resolution=64)


@pytest.fixture(scope="module")
def config():
    return get_task().reward_config(RewardConfig.make(model=f"{TINY_NAME}@random", views=VIEWS, resolution=64,
                                                      batch_size=3))


class RecordingSource:
    """Wraps a source and keeps what it was given."""

    def __init__(self, inner):
        self.inner, self.states, self.frames = inner, [], []

    def __call__(self, states, render):
        def rec(idx):
            f = render(idx)
            self.frames.append(f.copy())
            return f

        self.states.append(states.copy())
        return self.inner(states, rec)


def test_end_to_end(config):
    vlm = tiny_vlm(seed=0)
    source = RecordingSource(VLMEmbeddingSource(vlm, config.batch_size))
    train = reward_stack(2, config, ENV_CFG, vlm=vlm, source=source, phase_selector=RULE)
    env = train.venv
    try:
        env.reset()
        rng = np.random.default_rng(0)
        for t in range(4):  # crosses one episode end (3-step episodes)
            obs, reward, dones, infos = env.step(rng.uniform(-1, 1, (2, 4)).astype(np.float32))
            assert reward.shape == (2,) and reward.dtype == np.float32
            for i, full in enumerate(infos):
                info = full["reward"]
                assert info["kind"] == "vlm"
                assert info["scores_per_view"].shape == (len(VIEWS), 3)
                np.testing.assert_allclose(info["scores"], info["scores_per_view"].mean(0), atol=1e-6)
                assert info["phase"] == rule_phase(full["gripper_cube_distance"])
                assert info["score"] == pytest.approx(info["scores"][info["phase"]], abs=1e-6)
                assert -1.0 <= info["reward"] <= 0.0
                assert reward[i] == pytest.approx(info["reward"] + info["env"], abs=1e-6)
                assert "terminal_frames" not in full
            frames = source.frames[-1]
            assert frames.shape == (2, len(VIEWS), 64, 64, 3) and frames.dtype == np.uint8
            if t == 2:
                assert dones.all()
                # Scored on the state the episode ended in, not the state after the auto-reset.
                for i in range(2):
                    terminal = infos[i]["terminal_observation"]["observation"]
                    np.testing.assert_allclose(source.states[-1][i], terminal, atol=1e-6)
                    assert not np.allclose(source.states[-1][i], obs["observation"][i])
                    after_reset = env.venv.env_method("render_views", VIEWS, 64, indices=[i])[0]
                    assert not np.array_equal(frames[i], after_reset)
        assert train.reward_env.kind.resolution == 64 and train.reward_env.kind.views == VIEWS
    finally:
        env.close()


def test_custom_source_needs_no_model(config):
    """A cache-like source plus precomputed text embeddings: no VLM is loaded or rendered with."""

    def encoder(texts):
        v = np.random.default_rng(len(texts)).normal(size=(len(texts), 8)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    class ConstantSource:
        calls = 0

        def __call__(self, states, render):
            ConstantSource.calls += 1
            return np.tile(encoder(["x"] * 2)[None], (len(states), 1, 1))

    scorer = PhasedScorer(embed_prompts(encoder, get_task().prompts()), config.alpha, VIEWS)
    cfg = config.replace(model="PE-Core-bigG-14-448:meta")
    kind = VLMKind.from_config(cfg, source=ConstantSource(), scorer=scorer)
    env = reward_stack(2, cfg, ENV_CFG, kind=kind, seed=None, phase_selector=RULE).venv
    try:
        env.reset()
        _, reward, _, infos = env.step(np.zeros((2, 4), np.float32))
        assert ConstantSource.calls == 1 and reward.shape == (2,)
    finally:
        env.close()


def test_sub_envs_must_keep_terminal_frames(config):
    venv = DummyVecEnv([lambda: FetchPickAndLiftEnv(ENV_CFG)])
    try:
        with pytest.raises(ConfigError, match="TerminalFrames"):
            RewardVecEnv(venv, VLMKind.from_config(config, vlm=tiny_vlm(seed=0)), RULE)
    finally:
        venv.close()


class SequenceSource:
    """The same pseudo-random embeddings on the n-th call of every instance (no rendering)."""

    def __init__(self, views: int, dim: int = 8):
        self.views, self.dim, self.calls = views, dim, 0

    def __call__(self, states, render):
        self.calls += 1
        v = np.random.default_rng(self.calls).normal(size=(len(states), self.views, self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=-1, keepdims=True)


class FixedPhases:
    """A phase selector that ignores the state: the given phase for every env, or a cycle."""

    def __init__(self, phase: int | None):
        self.phase, self.t = phase, 0

    def __call__(self, states, infos=()):
        self.t += 1
        return np.full(len(states), self.t % 3 if self.phase is None else self.phase, dtype=np.int64)


def _rewards(config, scorer, selector, steps=8):
    kind = VLMKind.from_config(config, source=SequenceSource(len(VIEWS)), scorer=scorer)
    env = reward_stack(2, config, ENV_CFG, kind=kind, phase_selector=selector).venv
    try:
        env.reset()
        out = [env.step(np.zeros((2, 4), np.float32))[1] for _ in range(steps)]  # crosses 2 episode ends
    finally:
        env.close()
    return np.array(out)


@pytest.mark.slow
def test_single_prompt_reward_is_invariant_to_the_rule_phase(config):
    """Same VLM scores, different phases (the rule, fixed phases, a cycle): identical rewards."""

    def encoder(texts):
        v = np.stack([np.random.default_rng(sum(map(ord, t))).normal(size=8) for t in texts]).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    for shaping in ({}, {"trend": True, "momentum": True, "drop_penalty": True},
                    {"band": False, "bounds": "widen_only", "trend": True, "momentum": True, "drop_penalty": True}):
        cfg = config.replace(model="PE-Core-bigG-14-448:meta", single_prompt=True, shaping=shaping)
        scorer = PhasedScorer.from_config(cfg, encoder)
        assert scorer.num_phases == 1
        runs = [_rewards(cfg, scorer, sel) for sel in (RULE, FixedPhases(0), FixedPhases(2),
                                                          FixedPhases(None))]
        for r in runs[1:]:
            np.testing.assert_array_equal(r, runs[0])
    # The check can fail: the micro-task reward (three goals, per-phase bounds) does see the phase.
    cfg = config.replace(model="PE-Core-bigG-14-448:meta")
    scorer = PhasedScorer.from_config(cfg, encoder)
    assert not np.array_equal(_rewards(cfg, scorer, FixedPhases(0)), _rewards(cfg, scorer, FixedPhases(2)))


def test_single_prompt_in_the_band_is_a_labelled_control_that_sees_the_phase(config):
    """single_prompt_band: one goal scored, shaped inside the rule's band of three micro-tasks."""

    def encoder(texts):
        v = np.stack([np.random.default_rng(sum(map(ord, t))).normal(size=8) for t in texts]).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    cfg = config.replace(model="PE-Core-bigG-14-448:meta", single_prompt=True, single_prompt_band=True)
    scorer = PhasedScorer.from_config(cfg, encoder)
    assert scorer.num_phases == 1
    a, b = _rewards(cfg, scorer, FixedPhases(0)), _rewards(cfg, scorer, FixedPhases(2))
    assert (b > a).mean() > 0.9  # a later band pays more for the same score
    with pytest.raises(ConfigError, match="single_prompt_band"):
        RewardConfig.make(single_prompt_band=True)

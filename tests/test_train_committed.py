"""Runs kept with the results: resume/ until the run finishes, best/ chosen on validation at each
checkpoint, a run directory without checkpoints resumes from resume/ with the reward shaper's bounds
and the normaliser as they were, and `rmtl eval` reads best/ (rmtl.train.eval.committed)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rmtl.train.config import stage1_config


def _small(out, steps, **kw):
    return stage1_config(
        "oracle_rmtl", n_envs=2, n_steps=16, batch_size=16, n_epochs=2, total_timesteps=steps,
        checkpoint_every=32, eval_every=32, eval_episodes=2, validation_episodes=3, test_episodes=4, progress_bar=False,
        torch_threads=1, output_dir=str(out), vec_env="dummy", keep_results=True, normalize_observations=True,
        env={"max_episode_steps": 16}, **kw)


class StopAt:
    """An SB3 callback that ends training (as a stop would) once ``steps`` env steps are done."""

    def __new__(cls, steps):
        from stable_baselines3.common.callbacks import BaseCallback

        class _Stop(BaseCallback):
            def _on_step(self) -> bool:
                return self.num_timesteps < steps

        return _Stop()


@pytest.mark.slow
def test_resume_state_and_best_policy(tmp_path):
    from rmtl.reward.shaping import RewardShaper
    from rmtl.train.run.artifacts import load_normalizer
    from rmtl.train.stage1 import train_stage1

    run = tmp_path / "run"
    # A run stopped after 64 of 128 steps keeps resume/ (the step-64 checkpoint) and best/.
    train_stage1(_small(run, 128), callbacks=[StopAt(64)])
    assert (run / "resume" / "model.zip").is_file() and (run / "best" / "model.zip").is_file()
    saved = json.loads((run / "resume" / "meta.json").read_text())["num_timesteps"]
    assert saved == 64
    shaper_state = json.loads((run / "resume" / "reward_state.json").read_text())
    assert shaper_state["low"] != [[0.45] * 3] * 2  # the oracle's scores moved the tracking bounds
    norm = load_normalizer(run / "resume")
    # best/ has no optimiser moments and is small
    import zipfile

    with zipfile.ZipFile(run / "best" / "model.zip") as z:
        import io

        import torch

        opt = torch.load(io.BytesIO(z.read("policy.optimizer.pth")), weights_only=False)
    assert opt["state"] == {} and (run / "best" / "model.zip").stat().st_size < 1_000_000
    assert [r.split(",")[0] for r in (run / "validation.csv").read_text().split()[1:]] == ["32", "64"]

    # A new machine: the run directory without its checkpoints resumes from resume/.
    moved = tmp_path / "moved"
    shutil.copytree(run, moved, ignore=shutil.ignore_patterns("checkpoints"))
    import rmtl.train.run.session as session_mod

    restored = {}
    real, real_norm = session_mod.restore_reward_state, session_mod.restore_normalizer

    def spy(shaper, ck):
        real(shaper, ck)
        restored["state"], restored["ck"] = json.loads(json.dumps(shaper.state_dict())), ck

    def spy_norm(normalizer, ck):
        real_norm(normalizer, ck)
        restored["obs_mean"] = {k: rms.mean.copy() for k, rms in normalizer.obs_rms.items()}

    session_mod.restore_reward_state, session_mod.restore_normalizer = spy, spy_norm
    try:
        train_stage1(_small(moved, 128))
    finally:
        session_mod.restore_reward_state, session_mod.restore_normalizer = real, real_norm
    assert restored["ck"] == moved / "resume"
    assert (moved / "run_resume_000000064.json").is_file()
    assert not (moved / "resume").exists()  # finished: resume state removed
    # The resumed shaper started from the kept bounds: the same scores give the same rewards as the
    # shaper of the uninterrupted run at step 64.
    uninterrupted = RewardShaper(2, num_phases=3)
    uninterrupted.load_state_dict(shaper_state)
    assert restored["state"] == shaper_state
    resumed = RewardShaper(2, num_phases=3)
    resumed.load_state_dict(restored["state"])
    rng = np.random.default_rng(0)
    for _ in range(5):
        s, k = rng.uniform(0.4, 0.8, 2), rng.integers(0, 3, 2)
        np.testing.assert_array_equal(uninterrupted(s, k).reward, resumed(s, k).reward)
    # the normaliser continued from the kept statistics
    first = json.loads((moved / "run_resume_000000064.json").read_text())
    assert first["start_timesteps"] == 64
    assert set(restored["obs_mean"]) == set(norm.obs_rms)
    for key, rms in norm.obs_rms.items():
        np.testing.assert_array_equal(restored["obs_mean"][key], rms.mean)
        assert np.any(rms.mean != 0)  # statistics of 64 steps, not a fresh normaliser
    rows = (moved / "validation.csv").read_text().split()[1:]
    assert [r.split(",")[0] for r in rows] == ["32", "64", "96", "128"]
    # finished: the best and the final policy on the test seeds, in the schema the report reads
    from rmtl.train.eval.selection import TEST_SEED, load_selection

    sel = load_selection(moved)
    assert sel["final"]["num_timesteps"] == 128 and sel["best"]["test"]["episodes"] == 4
    assert sel["best"]["test"]["seed"] == TEST_SEED and sel["best"]["checkpoint"] in {r.split(",")[-1] for r in rows}
    # rmtl eval on the run directory without checkpoints evaluates best/
    from rmtl.train.eval.evaluate import resolve_checkpoint

    shutil.rmtree(moved / "checkpoints")
    assert resolve_checkpoint(moved) == moved / "best"


def test_restored_shaper_matches_the_saved_one_exactly():
    from rmtl.reward.shaping import RewardShaper

    a = RewardShaper(4, num_phases=3)
    rng = np.random.default_rng(1)
    for _ in range(50):
        a(rng.uniform(0.3, 0.9, 4), rng.integers(0, 3, 4))
    b = RewardShaper(4, num_phases=3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for _ in range(20):
        s, k = rng.uniform(0.3, 0.9, 4), rng.integers(0, 3, 4)
        a.reset(), b.reset()
        np.testing.assert_array_equal(a(s, k).reward, b(s, k).reward)
    with pytest.raises(Exception, match="shape"):
        RewardShaper(2, num_phases=3).load_state_dict(a.state_dict())

"""ProcessGroupVecEnv: envs spread over worker processes behave like one DummyVecEnv."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from rmtl.tasks.fetch_lift.env import EnvConfig


def _make(cfg):
    from rmtl.reward.terminal_frames import TerminalFrames
    from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv

    return TerminalFrames(FetchPickAndLiftEnv(cfg))


@pytest.mark.slow
def test_workers_match_dummy_vec_env():
    from stable_baselines3.common.vec_env import DummyVecEnv

    from rmtl.train.envs.process_group import ProcessGroupVecEnv

    cfg = EnvConfig(max_episode_steps=5, difficulty=0.3)
    make = functools.partial(_make, cfg)
    ref = DummyVecEnv([make] * 5)
    par = ProcessGroupVecEnv([make] * 5, workers=2)
    try:
        assert par.workers == 2 and par.num_envs == 5
        for v in (ref, par):
            v.seed(7)
        a, b = ref.reset(), par.reset()
        np.testing.assert_array_equal(a["observation"], b["observation"])
        rng = np.random.default_rng(0)
        for _ in range(7):  # crosses an episode end: auto-reset and terminal_observation
            act = rng.uniform(-1, 1, (5, 4))
            ra, rb = ref.step(act), par.step(act)
            np.testing.assert_array_equal(ra[0]["observation"], rb[0]["observation"])
            np.testing.assert_array_equal(ra[2], rb[2])
            for ia, ib in zip(ra[3], rb[3]):
                assert ia.keys() == ib.keys()
                if "terminal_observation" in ia:
                    np.testing.assert_array_equal(ia["terminal_observation"]["observation"],
                                                  ib["terminal_observation"]["observation"])
        # per-env calls keep the order asked for, across workers
        idx = [4, 0, 3]
        assert par.get_attr("difficulty", idx) == ref.get_attr("difficulty", idx)
        fa = ref.env_method("render_views", ["wide_view"], 64, indices=idx)
        fb = par.env_method("render_views", ["wide_view"], 64, indices=idx)
        for x, y in zip(fa, fb):
            np.testing.assert_array_equal(x, y)
        par.env_method("set_difficulty_range", 0.0, 0.0)
        assert all(par.env_is_wrapped(type(ref.envs[0])))
    finally:
        ref.close()
        par.close()


class _EnvironmentProbe(gym.Env):
    """A minimal env whose method reports the worker's environment variables."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.render_mode = None

    def reset(self, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def variable(self, name):
        import os

        return os.environ.get(name)


@pytest.mark.slow
def test_worker_thread_pools_and_rasteriser():
    from rmtl.env.threads import worker_thread_env
    from rmtl.train.envs.process_group import ProcessGroupVecEnv

    # the rasteriser's helper threads are the worker's threads less the one that calls it
    assert worker_thread_env(1)["LP_NUM_THREADS"] == "0"
    assert worker_thread_env(3) == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3",
                                    "LP_NUM_THREADS": "2"}
    par = ProcessGroupVecEnv([_EnvironmentProbe] * 2, workers=2, threads_per_worker=1)
    try:
        assert par.env_method("variable", "LP_NUM_THREADS") == ["0", "0"]
        assert par.env_method("variable", "OMP_NUM_THREADS") == ["1", "1"]
    finally:
        par.close()

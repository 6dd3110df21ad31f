"""The environment is registered the Gymnasium way and passes Gymnasium's own checker."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from rmtl import ENV_ID


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_import_rmtl_registers_the_env_without_loading_mujoco():
    p = _python("import sys, gymnasium as gym, rmtl; "
                f"assert {ENV_ID!r} in gym.registry, 'not registered'; "
                "assert 'mujoco' not in sys.modules and 'rmtl.env' not in sys.modules, 'env loaded eagerly'")
    assert p.returncode == 0, p.stderr[-2000:]


def test_gymnasium_make_with_the_module_prefix_needs_no_import_of_rmtl():
    p = _python("import sys, gymnasium as gym; assert 'rmtl' not in sys.modules; "
                f"env = gym.make('rmtl:{ENV_ID}'); obs, info = env.reset(seed=0); "
                "assert env.observation_space.contains(obs); env.close()")
    assert p.returncode == 0, p.stderr[-2000:]


# Fetch observations (positions, velocities) have no natural bounds: the Box spaces are
# infinite, as Gymnasium-Robotics' own Fetch spaces are, and its checker warns about that.
UNBOUNDED = ("observation space minimum value is -infinity", "observation space maximum value is infinity")


def test_check_env_passes_without_other_warnings():
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    env = gym.make(ENV_ID)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)
    finally:
        env.close()
    other = [str(w.message) for w in caught if not any(u in str(w.message) for u in UNBOUNDED)]
    assert not other, other


def test_an_unsupported_render_mode_is_refused_in_one_line():
    import gymnasium as gym

    from rmtl.errors import ConfigError

    with pytest.raises(ConfigError, match="render_mode 'ansi' is not supported"):
        gym.make(ENV_ID, render_mode="ansi")  # ('human' Gymnasium wraps itself)

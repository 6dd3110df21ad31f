"""The Stage-2 vec-env stack: the Stage-1 stack with the manager's hooks inserted."""

from __future__ import annotations

from typing import Any

from rmtl.errors import ConfigError
from rmtl.train.config import Stage1Config
from rmtl.train.manager import ManagerController, ManagerDecide, ManagerSegments, ProgressSignal
from rmtl.train.train_env import build_train_env
from rmtl.train.wrappers import PhaseObservation


def _find_wrapper(venv: Any, cls: type) -> tuple[Any, Any]:
    """(the wrapper of type ``cls`` in the stack, the wrapper directly above it or None)."""
    above, cur = None, venv
    while cur is not None:
        if isinstance(cur, cls):
            return cur, above
        above, cur = cur, getattr(cur, "venv", None)
    raise ConfigError(f"no {cls.__name__} in the vec-env stack")


def build_stage2_env(s1: Stage1Config, controller: ManagerController, **kwargs: Any):
    """The Stage-1 stack of :func:`rmtl.train.train_env.build_train_env` with the manager hooks inserted
    and the controller's selector driving both the reward and the phase one-hot."""
    env = build_train_env(s1, **kwargs)
    reward_env = env.reward_env
    reward_env.venv = ManagerDecide(reward_env.venv, controller)  # below the reward: decide before scoring
    if hasattr(reward_env, "phase_selector"):
        reward_env.phase_selector = controller.selector
    phase_obs, above = _find_wrapper(env.venv, PhaseObservation)
    phase_obs.selector = controller.selector
    segs = ManagerSegments(phase_obs, controller)
    if above is None:
        env.venv = segs
    else:
        above.venv = segs
    if controller.progress is None:
        controller.progress = ProgressSignal(s1.n_envs, s1.reward.shaping, s1.dense if not s1.uses_vlm else None)
    return env

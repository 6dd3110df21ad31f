"""Building the VLM reward's vec env: :class:`TerminalFrames` around every sub-env (so an
episode's last state is rendered before SB3's auto-reset) and :func:`make_reward_vec_env`.

The wrapper itself is the one :class:`~rmtl.reward.vec_env.RewardVecEnv` of every reward kind.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import gymnasium as gym
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from rmtl.reward.kinds.vlm import RewardConfig
from rmtl.reward.phase import PhaseSelector
from rmtl.reward.shaping import RewardShaper
from rmtl.reward.terminal_frames import TERMINAL_FRAMES, TerminalFrames
from rmtl.reward.vec_env import RewardVecEnv, step_end_states

__all__ = ["TERMINAL_FRAMES", "TerminalFrames", "make_reward_vec_env", "step_end_states", "vlm_reward_env"]


def vlm_reward_env(venv: VecEnv, config: RewardConfig | None = None, *, phase_selector: PhaseSelector,
                   band_phases: int = 0, **kind_kwargs: Any) -> RewardVecEnv:
    """``venv`` (sub-envs in TerminalFrames) with the phased multi-view VLM reward of ``config``, for
    the micro-tasks ``phase_selector`` picks (the task's rule, ``RulePhaseSelector(task.phases)``).

    ``kind_kwargs`` go to :meth:`VLMKind.from_config` (``vlm``, ``source``, ``scorer``).
    """
    from rmtl.reward.kinds.vlm import VLMKind

    config = config or RewardConfig()
    kind = VLMKind.from_config(config, band_phases=band_phases, **kind_kwargs)
    shaper = RewardShaper(venv.num_envs, config.shaping, num_phases=kind.num_phases)
    return RewardVecEnv(venv, kind, phase_selector, shaper)


def make_reward_vec_env(
    num_envs: int,
    config: RewardConfig | None = None,
    *,
    env_fn: Callable[[], gym.Env],
    vec_env_cls: type[VecEnv] = DummyVecEnv,
    seed: int | None = None,
    **wrapper_kwargs: Any,
) -> RewardVecEnv:
    """N ``env_fn()`` (e.g. ``lambda: task.make_env(env_config)``) each in TerminalFrames, vectorised,
    with the VLM reward."""

    def make() -> gym.Env:
        return TerminalFrames(env_fn())

    venv = vec_env_cls([make for _ in range(int(num_envs))])
    if seed is not None:
        venv.seed(seed)
    return vlm_reward_env(venv, config, **wrapper_kwargs)

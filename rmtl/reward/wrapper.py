"""Building the VLM reward's vec env: :class:`TerminalFrames` around every sub-env (so an
episode's last state is rendered before SB3's auto-reset) and :func:`make_reward_vec_env`.

The wrapper itself is the one :class:`~rmtl.reward.vec_env.RewardVecEnv` of every reward kind.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import gymnasium as gym
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from rmtl.reward.config import RewardConfig
from rmtl.reward.phase import PhaseSelector
from rmtl.reward.shaping import RewardShaper
from rmtl.reward.vec_env import TERMINAL_FRAMES, RewardVecEnv, step_end_states

__all__ = ["TERMINAL_FRAMES", "TerminalFrames", "make_reward_vec_env", "step_end_states", "vlm_reward_env"]


class TerminalFrames(gym.Wrapper):
    """Renders the reward views on the last step of an episode into ``info['terminal_frames']``.

    Views and resolution are set by the reward kind (:meth:`set_reward_render`); until
    then nothing is rendered. Put it outermost, above any TimeLimit, so it sees truncation.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._views: tuple[str, ...] | None = None
        self._resolution: int | None = None

    def set_reward_render(self, views: Sequence[str], resolution: int) -> None:
        self._views, self._resolution = tuple(views), int(resolution)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if (terminated or truncated) and self._views is not None:
            info = dict(info)
            info[TERMINAL_FRAMES] = self.env.unwrapped.render_views(self._views, self._resolution)
        return obs, reward, terminated, truncated, info


def vlm_reward_env(venv: VecEnv, config: RewardConfig | None = None, *, phase_selector: PhaseSelector | None = None,
                   band_phases: int = 0, **kind_kwargs: Any) -> RewardVecEnv:
    """``venv`` (sub-envs in TerminalFrames) with the phased multi-view VLM reward of ``config``.

    ``kind_kwargs`` go to :meth:`VLMKind.from_config` (``vlm``, ``source``, ``scorer``).
    """
    from rmtl.reward.kinds.vlm import VLMKind

    config = config or RewardConfig()
    kind = VLMKind.from_config(config, band_phases=band_phases, **kind_kwargs)
    return RewardVecEnv(venv, kind, phase_selector, RewardShaper(venv.num_envs, config.shaping, kind.num_phases))


def make_reward_vec_env(
    num_envs: int,
    config: RewardConfig | None = None,
    env_config: Any = None,
    *,
    vec_env_cls: type[VecEnv] = DummyVecEnv,
    seed: int | None = None,
    env_fn: Callable[[], gym.Env] | None = None,
    **wrapper_kwargs: Any,
) -> RewardVecEnv:
    """N FetchPickAndLiftEnv (or ``env_fn()``) each in TerminalFrames, vectorised, with the VLM reward."""
    from rmtl.env import FetchPickAndLiftEnv

    def make() -> gym.Env:
        env = env_fn() if env_fn is not None else FetchPickAndLiftEnv(env_config)
        return TerminalFrames(env)

    venv = vec_env_cls([make for _ in range(int(num_envs))])
    if seed is not None:
        venv.seed(seed)
    return vlm_reward_env(venv, config, **wrapper_kwargs)

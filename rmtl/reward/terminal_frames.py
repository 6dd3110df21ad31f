"""Rendering an episode's last state before SB3's auto-reset replaces it."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym

TERMINAL_FRAMES = "terminal_frames"
"""The info key of the frames of an episode's last state."""


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

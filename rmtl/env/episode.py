"""One seeded episode of a policy in an env: the loop every evaluation, check and recorder shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Mapping

Reset = Callable[[Any, Mapping[str, Any]], None]
"""(observation, info) -> None: sees the reset observation."""
Transition = Callable[[Any, Any, bool, bool, Mapping[str, Any]], None]
"""(action, next observation, terminated, truncated, info) -> None: sees every step."""


@dataclass(frozen=True)
class EpisodeEnd:
    """How an episode ended: env steps taken, the env's ``is_success`` and the last info."""

    steps: int
    success: bool
    info: Mapping[str, Any]


def run_episode(env: Any, act: Callable[[Any], Any], *, seed: int | None = None,
                options: Mapping[str, Any] | None = None, on_reset: Reset | None = None,
                on_step: Transition | None = None) -> EpisodeEnd:
    """Reset ``env`` (``seed``, ``options``) and step ``act(observation)`` until the episode
    terminates or is truncated. ``on_reset`` sees the reset observation, ``on_step`` each
    transition (as the env returned it)."""
    obs, info = env.reset(seed=seed, options=dict(options) if options is not None else None)
    if on_reset is not None:
        on_reset(obs, info)
    steps, done = 0, False
    while not done:
        action = act(obs)
        obs, _, terminated, truncated, info = env.step(action)
        steps += 1
        done = bool(terminated or truncated)
        if on_step is not None:
            on_step(action, obs, bool(terminated), bool(truncated), info)
    return EpisodeEnd(steps, bool(info.get("is_success", False)), info)

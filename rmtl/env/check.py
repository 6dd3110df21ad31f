"""Success rates of simple policies on a task's env: the solvability check of the task definition."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from rmtl.env.episode import run_episode

Policy = Callable[[dict], np.ndarray]


@dataclass(frozen=True)
class SuccessRate:
    policy: str
    difficulty: float
    episodes: int
    successes: int
    mean_length: float

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    def wilson_interval(self, z: float = 1.96) -> tuple[float, float]:
        """95% Wilson score interval of the success rate."""
        n, p = self.episodes, self.rate
        if n == 0:
            return (0.0, 1.0)
        denom = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
        return (max(0.0, centre - half), min(1.0, centre + half))


def success_rate(env: gym.Env, policy: Policy, name: str, episodes: int, difficulty: float,
                 seed: int = 0) -> SuccessRate:
    """Run ``episodes`` seeded episodes (seeds seed, seed+1, ...) at a fixed difficulty."""
    successes, lengths = 0, []
    for ep in range(episodes):
        end = run_episode(env, policy, seed=seed + ep, options={"difficulty": difficulty})
        successes += int(end.success)
        lengths.append(end.info["step"])
    return SuccessRate(name, difficulty, episodes, successes, float(np.mean(lengths)) if lengths else 0.0)


def random_policy(env: gym.Env, seed: int = 0) -> Policy:
    rng = np.random.default_rng(seed)
    return lambda obs: rng.uniform(-1.0, 1.0, size=env.action_space.shape).astype(np.float32)

"""The hand-written dense reference reward of the state (no rendering, no shaping).

Reference only: it shows what PPO reaches with this task definition and a hand-made signal.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from rmtl.reward.kinds import register_kind
from rmtl.reward.kinds.base import KindStep, RewardKind
from rmtl.reward.shaping import RewardShaper


@register_kind("dense")
class DenseKind(RewardKind):
    progress_source = "dense"
    privileged = True

    def __init__(self, reward_fn: Callable[[np.ndarray], np.ndarray], num_phases: int, add_env_reward: bool = True):
        self.reward_fn = reward_fn
        """states -> the shaped part of the reward (e.g. the pick-and-lift dense reference)."""
        self.num_phases = int(num_phases)
        self.add_env_reward = add_env_reward

    @classmethod
    def from_run(cls, run, task, *, reward, vlm=None, source=None) -> "DenseKind":
        from rmtl.errors import ConfigError

        if task.dense_reward is None:
            raise ConfigError(f"task {task.name!r} defines no dense reference reward (Task.dense_reward)")
        return cls(lambda states: task.dense_reward(states, run.dense), len(task.micro_tasks.names),
                   run.dense.add_env_reward)

    def step(self, states: np.ndarray, phases: np.ndarray, shaper: RewardShaper, render) -> KindStep:
        return KindStep(np.asarray(self.reward_fn(states), dtype=np.float32))

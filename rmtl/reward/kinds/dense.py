"""The hand-written dense reference reward of the state (no rendering, no shaping).

Reference only: it shows what PPO reaches with this task definition and a hand-made signal.
"""

from __future__ import annotations

from typing import Literal
from collections.abc import Callable

import numpy as np
from pydantic import Field

from rmtl.reward.config import RewardKindConfig
from rmtl.reward.kinds import register_kind
from rmtl.reward.kinds.base import KindStep, RewardKind, RunFacts
from rmtl.reward.shaping import RewardShaper


class DenseRewardConfig(RewardKindConfig):
    """Hand-written dense reference reward (no VLM, no rendering, no shaping); see docs/stage1.md.

    The weights are the parameters of the task's ``Task.dense_reward`` (pick-and-lift's:
    ``r = -distance_weight * d + lift_weight * clip(lift / lift_target, 0, 1) *
    [d <= near_distance]`` plus the environment's +1 success bonus, with d the gripper-cube
    distance (m) and lift the cube height above its rest height (m), both read from the state).
    Defined here, with its kind, because the kind's config is read below the tasks.
    """

    kind: Literal["dense"] = "dense"
    distance_weight: float = Field(1.0, ge=0)
    """Weight of minus the gripper-cube distance (m)."""
    lift_weight: float = Field(0.5, ge=0)
    """Weight of the lift term paid while the gripper is at the cube."""
    lift_target: float = Field(0.02, gt=0)
    """Lift (m) at which the lift term saturates (the task's success lift)."""
    near_distance: float = Field(0.04, gt=0)
    """Gripper-cube distance (m) within which lift is rewarded (the rule's grasp bin)."""
    add_env_reward: bool = True
    """Add the environment's +1 success bonus."""


@register_kind("dense", config=DenseRewardConfig)
class DenseKind(RewardKind):
    progress_source = "dense"
    privileged = True

    def __init__(self, reward_fn: Callable[[np.ndarray], np.ndarray], num_phases: int, add_env_reward: bool = True):
        self.reward_fn = reward_fn
        """states -> the shaped part of the reward (e.g. the pick-and-lift dense reference)."""
        self.num_phases = int(num_phases)
        self.add_env_reward = add_env_reward

    @classmethod
    def build(cls, reward: DenseRewardConfig, task, facts: RunFacts, *, vlm=None, source=None) -> DenseKind:
        from rmtl.errors import ConfigError

        if task.dense_reward is None:
            raise ConfigError(f"task {task.name!r} defines no dense reference reward (Task.dense_reward)")
        return cls(lambda states: task.dense_reward(states, reward), len(task.micro_tasks.names),
                   reward.add_env_reward)

    def step(self, states: np.ndarray, phases: np.ndarray, shaper: RewardShaper, render) -> KindStep:
        return KindStep(np.asarray(self.reward_fn(states), dtype=np.float32))

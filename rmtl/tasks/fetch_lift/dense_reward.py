"""The pick-and-lift dense reference reward: hand-written from the state (no VLM, no rendering)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from rmtl.config import Config
from rmtl.tasks.fetch_lift.state import gripper_cube_distance, lift_height


class DenseRewardConfig(Config):
    """Hand-written dense reference reward (no VLM, no rendering); see docs/stage1.md.

    ``r = -distance_weight * d + lift_weight * clip(lift / lift_target, 0, 1) * [d <= near_distance]``
    plus the environment's +1 success bonus, with d the gripper-cube distance (m) and
    lift the cube height above its rest height (m), both read from the 25-D state.
    """

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


def dense_reward(states: np.ndarray, config: DenseRewardConfig) -> np.ndarray:
    """The dense reference reward of 25-D states [N, 25] -> float32 [N] (without the success bonus)."""
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    d = np.asarray(gripper_cube_distance(s), dtype=np.float64).reshape(-1)
    lift = np.asarray(lift_height(s), dtype=np.float64).reshape(-1)
    near = d <= config.near_distance
    lift_term = np.clip(lift / config.lift_target, 0.0, 1.0) * near
    return (-config.distance_weight * d + config.lift_weight * lift_term).astype(np.float32)

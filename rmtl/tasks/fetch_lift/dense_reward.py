"""The pick-and-lift dense reference reward: hand-written from the state (no VLM, no rendering)."""

from __future__ import annotations

import numpy as np

# The dense kind's config: its weights are this reward's parameters (read below the tasks).
from rmtl.reward.kinds.dense import DenseRewardConfig
from rmtl.tasks.fetch_lift.state import gripper_cube_distance, lift_height


def dense_reward(states: np.ndarray, config: DenseRewardConfig) -> np.ndarray:
    """The dense reference reward of 25-D states [N, 25] -> float32 [N] (without the success bonus):
    ``-distance_weight * d + lift_weight * clip(lift / lift_target, 0, 1) * [d <= near_distance]``
    with d the gripper-cube distance (m) and lift the cube height above its rest height (m)."""
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    d = np.asarray(gripper_cube_distance(s), dtype=np.float64).reshape(-1)
    lift = np.asarray(lift_height(s), dtype=np.float64).reshape(-1)
    near = d <= config.near_distance
    lift_term = np.clip(lift / config.lift_target, 0.0, 1.0) * near
    return (-config.distance_weight * d + config.lift_weight * lift_term).astype(np.float32)


__all__ = ["DenseRewardConfig", "dense_reward"]

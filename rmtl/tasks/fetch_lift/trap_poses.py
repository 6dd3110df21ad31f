"""The two sides of pick-and-lift's trap ratio (``Task.trap_poses``): coverage scenes with the cube
resting and the gripper anywhere, against scenes with the cube held and lifted.

A one-score reward whose best-paid resting scene earns nearly what a lift earns has a pose a learner
can settle in without touching the cube (docs/reward_quality.md, "Poses no family visits").
"""

from __future__ import annotations

import numpy as np

from rmtl.tasks.fetch_lift.coverage import coverage_category
from rmtl.tasks.fetch_lift.quality import LIFTED, RESTING
from rmtl.tasks.fetch_lift.state import lift_height


def trap_poses(states: np.ndarray, scenes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(resting, lifted) bool [N]: "free" coverage scenes with the cube resting (below 0.5 cm), and
    "held" scenes lifted more than 2 cm (the quality metrics' thresholds)."""
    lift = np.asarray(lift_height(np.atleast_2d(np.asarray(states, dtype=np.float64)))).reshape(-1)
    category = np.array([coverage_category(int(e)) for e in np.asarray(scenes).reshape(-1)])
    return (category == "free") & (lift < RESTING), (category == "held") & (lift > LIFTED)


__all__ = ["trap_poses"]

"""Micro-tasks (phases) and the distance rule that selects one (definition: docs/reward.md,
"Phase selection").

Task order matters: the phase offset of the reward shaping uses the index.
"""

from __future__ import annotations

import numpy as np

PHASES: tuple[str, ...] = ("approach", "align", "grasp")
"""Micro-tasks in task order; the index of a name is its phase id."""

APPROACH, ALIGN, GRASP = 0, 1, 2

GRASP_MAX_DISTANCE = 0.04
"""Gripper-cube distance (m) at or below which the rule selects grasp: bin (0, 0.04]."""

ALIGN_MAX_DISTANCE = 0.15
"""Gripper-cube distance (m) at or below which the rule selects align: bin (0.04, 0.15]."""


def rule_phase(distance: float | np.ndarray) -> int | np.ndarray:
    """Phase id chosen by the Stage-1 distance rule for a gripper-cube distance in metres.

    Bins: (0, 0.04] grasp, (0.04, 0.15] align, (0.15, inf) approach. Works on scalars
    and arrays (returns int64 for arrays).
    """
    d = np.asarray(distance, dtype=np.float64)
    phase = np.where(d <= GRASP_MAX_DISTANCE, GRASP, np.where(d <= ALIGN_MAX_DISTANCE, ALIGN, APPROACH))
    if phase.ndim == 0:
        return int(phase)
    return phase.astype(np.int64)


def phase_one_hot(phase: int | np.ndarray, num_phases: int = len(PHASES)) -> np.ndarray:
    """One-hot float32 encoding of phase ids (scalar -> [K], array [...] -> [..., K])."""
    p = np.asarray(phase, dtype=np.int64)
    return np.eye(num_phases, dtype=np.float32)[p]

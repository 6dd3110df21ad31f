"""The pick-and-lift micro-tasks (phases) and the distance rule that selects one (definition:
docs/reward.md, "Phase selection"), read from the task's spec ``micro_tasks.yaml`` beside this
module.

Task order matters: the phase offset of the reward shaping uses the index.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rmtl.micro_tasks import MicroTaskSpec

MICRO_TASKS = MicroTaskSpec.from_yaml(Path(__file__).with_name("micro_tasks.yaml"))
"""Names, prompts and phase rule of the pick-and-lift micro-tasks."""

PHASES: tuple[str, ...] = MICRO_TASKS.names
"""Micro-tasks in task order; the index of a name is its phase id."""

APPROACH, ALIGN, GRASP = (PHASES.index(n) for n in ("approach", "align", "grasp"))

GRASP_MAX_DISTANCE = MICRO_TASKS.bound("grasp")
"""Gripper-cube distance (m) at or below which the rule selects grasp: bin (0, 0.04]."""

ALIGN_MAX_DISTANCE = MICRO_TASKS.bound("align")
"""Gripper-cube distance (m) at or below which the rule selects align: bin (0.04, 0.15]."""


def rule_phase(distance: float | np.ndarray) -> int | np.ndarray:
    """Phase id chosen by the Stage-1 distance rule for a gripper-cube distance in metres.

    Bins: (0, 0.04] grasp, (0.04, 0.15] align, (0.15, inf) approach. Works on scalars
    and arrays (returns int64 for arrays).
    """
    return MICRO_TASKS.phase(distance)

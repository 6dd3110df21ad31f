"""The pick-and-lift task's record layout, as a store describes it to outside readers:
the names of the 25 state fields, the 11 key fields and the 4 action components, the
phase codes and the prompt roles (docs/storage.md, "Self-description").

Importing this module imports no MuJoCo: it only reads rmtl.tasks.fetch_lift.state's constants.
"""

from __future__ import annotations

from typing import Any

from rmtl.tasks.fetch_lift.phases import ALIGN_MAX_DISTANCE, GRASP_MAX_DISTANCE, PHASES
from rmtl.tasks.fetch_lift.state import (
    CUBE_POS, CUBE_REL_POS, CUBE_ROT, CUBE_VELP, CUBE_VELR, FINGER_VEL, FINGER_WIDTHS, GRIPPER_POS,
    GRIPPER_VELP, KEY_FIELDS, KEY_SPEC, ROTATION_SCALE, STATE_DIM,
)

_STATE_GROUPS = (
    ("gripper", GRIPPER_POS, "xyz", "gripper position (m)"),
    ("cube", CUBE_POS, "xyz", "cube position (m)"),
    ("cube_rel", CUBE_REL_POS, "xyz", "cube minus gripper position (m)"),
    ("finger", FINGER_WIDTHS, "lr", "finger widths (m)"),
    ("cube_rot", CUBE_ROT, "xyz", "cube Euler angles (rad)"),
    ("cube_velp", CUBE_VELP, "xyz", "cube velocity relative to the gripper (m per step)"),
    ("cube_velr", CUBE_VELR, "xyz", "cube angular velocity (rad per step)"),
    ("gripper_velp", GRIPPER_VELP, "xyz", "gripper velocity (m per step)"),
    ("finger_vel", FINGER_VEL, "lr", "finger velocities (m per step)"),
)

STATE_FIELDS: tuple[str, ...] = tuple(f"{name}_{axis}" for name, _, axes, _ in _STATE_GROUPS for axis in axes)
"""Names of the 25 state components in order (the env's ``observation`` vector)."""
assert len(STATE_FIELDS) == STATE_DIM and [s.start for _, s, _, _ in _STATE_GROUPS] == sorted(
    s.start for _, s, _, _ in _STATE_GROUPS)

ACTION_FIELDS: tuple[str, ...] = ("dx", "dy", "dz", "gripper")
"""The 4 action components in [-1, 1]: gripper displacement x, y, z and the finger command."""

PROMPT_ROLES: dict[str, str] = {
    "baseline": "the scene without the goal property (b of the goal-baseline projection)",
    **{p: f"goal of the {p} micro-task (phase {i})" for i, p in enumerate(PHASES)},
    "single": "the single global goal of the single-prompt baseline (its only goal)",
}
"""What each role of a text embedding is."""


def layout() -> dict[str, Any]:
    """JSON record of the layout (store attribute ``rmtl.layout``)."""
    return {
        "state_fields": list(STATE_FIELDS),
        "state_groups": {name: [s.start, s.stop, what] for name, s, _, what in _STATE_GROUPS},
        "key_fields": list(KEY_FIELDS),
        "key_rotation_scale": ROTATION_SCALE,
        "action_fields": list(ACTION_FIELDS),
        "phase_codes": {str(i): p for i, p in enumerate(PHASES)},
        "phase_rule": f"gripper-cube distance d (m): grasp if d <= {GRASP_MAX_DISTANCE}, align if d <= "
                      f"{ALIGN_MAX_DISTANCE}, else approach",
        "prompt_roles": dict(PROMPT_ROLES),
    }


def store_description() -> dict[str, Any]:
    """``DatasetStore.create`` keywords describing a pick-and-lift store: its key spec, field
    layout and action width (storage itself knows nothing about the task)."""
    return {"key_spec": KEY_SPEC, "layout": layout(), "action_dim": len(ACTION_FIELDS)}

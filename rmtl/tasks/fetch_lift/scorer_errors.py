"""What a camera sees of pick-and-lift, and the confusions a pixel scorer makes: the task's
half of the ``degraded_oracle`` reward kind (definitions: docs/reward_quality.md).

``visible_state`` is the low-dimensional picture a frame shows (metres throughout, so one
length scale fits every axis); the confusions are regions of that picture where the stand-in
VLMs were measured to pay one micro-task's score for a state that is not its goal.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from rmtl.task import ScorerConfusion
from rmtl.tasks.fetch_lift.state import CUBE_POS, FINGER_WIDTHS, GRIPPER_POS, gripper_cube_distance, lift_height

VISIBLE_FIELDS = ("gripper_x", "gripper_y", "gripper_z", "cube_x", "cube_y", "cube_z",
                  "offset_x", "offset_y", "offset_z", "jaw_opening", "lift")

RESTING_LIFT = 0.005
"""Cube height above rest (m) below which it rests on the table (as the quality metrics count it)."""
AT_GRIPPER = 0.04
"""Gripper-cube distance (m) within which the cube is at the gripper (the grasp bin)."""
HOVER_LOW, HOVER_HIGH = 0.15, 0.30
"""Heights (m) of the grip site above the cube centre counted as hovering: above the approach
bin's edge, so a hovering hand stays in the approach micro-task."""
HOVER_LINED_UP = 0.05
"""Horizontal grip-site-to-cube distance (m) under which a hovering hand is over the cube."""
REACH_NEAR, REACH_FAR = 0.23, 0.42
"""Horizontal grip-site-to-cube distances (m) of the reach pose: where one-view single-prompt
learners settled (the gripper 23-42 cm out from a resting cube)."""
REACH_LOW, REACH_HIGH = 0.05, 0.15
"""Heights (m) of the grip site above the cube centre in the reach pose."""


def visible_state(states: np.ndarray) -> np.ndarray:
    """[N, 25] -> [N, 11] (``VISIBLE_FIELDS``): gripper and cube positions, their offset, the jaw
    opening (sum of finger widths) and the lift, in metres."""
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    grip, cube = s[:, GRIPPER_POS], s[:, CUBE_POS]
    jaw = s[:, FINGER_WIDTHS].sum(axis=1, keepdims=True)
    lift = np.asarray(lift_height(s), dtype=np.float64).reshape(-1, 1)
    return np.concatenate([grip, cube, grip - cube, jaw, lift], axis=1)


def resting_at_gripper(states: np.ndarray) -> np.ndarray:
    """[N] bool: the cube at the gripper but resting on the table (the grasp prompt's hard negative:
    ``sit_at_cube``, ``grasp_and_drop``)."""
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    d = np.asarray(gripper_cube_distance(s), dtype=np.float64).reshape(-1)
    return (d <= AT_GRIPPER) & (np.asarray(lift_height(s)).reshape(-1) < RESTING_LIFT)


def hovering_above(states: np.ndarray) -> np.ndarray:
    """[N] bool: the hand lined up over the cube but 15-30 cm above it (still in the approach bin)."""
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    off = s[:, GRIPPER_POS] - s[:, CUBE_POS]
    horizontal = np.linalg.norm(off[:, :2], axis=1)
    return (horizontal <= HOVER_LINED_UP) & (off[:, 2] >= HOVER_LOW) & (off[:, 2] <= HOVER_HIGH)


def reach_pose(states: np.ndarray) -> np.ndarray:
    """[N] bool: the cube resting and the hand held 23-42 cm out from it, 5-15 cm above it (a pose
    no qualification family passes through; the one-view single-prompt reward's trap)."""
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    off = s[:, GRIPPER_POS] - s[:, CUBE_POS]
    horizontal = np.linalg.norm(off[:, :2], axis=1)
    resting = np.asarray(lift_height(s)).reshape(-1) < RESTING_LIFT
    return (resting & (horizontal >= REACH_NEAR) & (horizontal <= REACH_FAR)
            & (off[:, 2] >= REACH_LOW) & (off[:, 2] <= REACH_HIGH))


SCORER_CONFUSIONS = MappingProxyType({
    "grasp_resting": ScorerConfusion("grasp", resting_at_gripper,
                                     "the grasp score pays a cube resting at the gripper as if lifted"),
    "approach_hover": ScorerConfusion("approach", hovering_above,
                                      "the approach score pays hovering 15-30 cm over the cube as the approach goal"),
    "reach_pose": ScorerConfusion(None, reach_pose,
                                  "every score pays the hand held 23-42 cm out from a resting cube as the task done"),
})
"""The pick-and-lift confusions by name."""

__all__ = ["SCORER_CONFUSIONS", "VISIBLE_FIELDS", "hovering_above", "reach_pose", "resting_at_gripper", "visible_state"]

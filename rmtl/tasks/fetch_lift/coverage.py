"""Coverage scenes of pick-and-lift: states set directly, not reached by a policy, so a scorer's
training data covers what a camera can see of the task (gripper anywhere, any jaw opening, cube
anywhere and in any pose, held or not) rather than the paths some policies take.

Scene ``i`` of a coverage rollout has a category fixed by ``i`` (``coverage_category``) and a
geometry drawn from the rollout's generator:

- ``free``: gripper uniform over the workspace box down to the table, jaw opening uniform, cube
  uniform over the table area with random yaw (the hand never inside the cube);
- ``held``: the cube between the fingers, jaws closed on it, lifted 0-10 cm;
- ``between_jaws``: the cube at rest between open or closed jaws, not lifted (the grasp prompt's
  hard negatives);
- ``pushed``: the cube off any start, the hand low beside it;
- ``tipped``: the cube on a side, at a random yaw, the hand free.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rmtl.tasks.fetch_lift.state import CUBE_REST_HEIGHT

CATEGORY_CYCLE = ("free",) * 10 + ("held",) * 4 + ("between_jaws",) * 3 + ("pushed",) * 2 + ("tipped",)
"""Categories of scenes i = 0..19 (then repeating): half free, a fifth held, ..."""
CATEGORIES = tuple(dict.fromkeys(CATEGORY_CYCLE))
TABLE_LOW, TABLE_HIGH = np.array([1.10, 0.45]), np.array([1.50, 1.05])
"""Table area (x, y, m) cube centres are drawn from: inside the cameras' views and the arm's reach."""
WORKSPACE_LOW, WORKSPACE_HIGH = np.array([1.00, 0.35, 0.42]), np.array([1.60, 1.15, 0.90])
"""Grip-site box (m) of free scenes: the env's start box, down to the table (grip site 2 cm above it)."""
HALF = 0.025
"""Half the cube's width (m)."""
OPEN, ON_CUBE = 0.05, 0.024
"""Finger position controls (m per finger): fully open, and closed on the cube's faces."""
MAX_LIFT = 0.10
DOWN_SHARE = 0.7
"""Share of scenes with the hand pointing down (as after the first ~15 steps of an episode); the
rest are turned part of the way from the reset pose, as in an episode's first steps. Held and
between-jaws scenes always point down: a grasp happens with the hand down."""


def coverage_category(episode: int) -> str:
    """The category of coverage scene ``episode``."""
    return CATEGORY_CYCLE[int(episode) % len(CATEGORY_CYCLE)]


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def _free_gripper(rng: np.random.Generator, cube: np.ndarray) -> np.ndarray:
    """A grip-site position in the workspace box whose fingers (1.9 cm below it) stay out of the cube."""
    while True:
        g = rng.uniform(WORKSPACE_LOW, WORKSPACE_HIGH)
        over = np.all(np.abs(g[:2] - cube[:2]) < HALF + 0.035)
        if not over or g[2] > cube[2] + HALF + 0.02:
            return g


def coverage_scene(env: Any, rng: np.random.Generator, episode: int) -> tuple[dict, dict]:
    """Set scene ``episode`` on a reset pick-and-lift env; returns its (observation, info)."""
    category = coverage_category(episode)
    turn = 1.0 if category in ("held", "between_jaws") or rng.random() < DOWN_SHARE else float(rng.uniform())
    xy = rng.uniform(TABLE_LOW, TABLE_HIGH)
    cube = np.array([xy[0], xy[1], CUBE_REST_HEIGHT])
    # Jaws close along one horizontal axis: a held cube is squared to it (0 or 90 deg, +-10 deg).
    squared = rng.choice([0.0, np.pi / 2]) + rng.uniform(-0.17, 0.17)
    if category == "free":
        return env.set_scene(_free_gripper(rng, cube), rng.uniform(0.0, OPEN), cube, _yaw_quat(rng.uniform(-np.pi, np.pi)), turn)
    if category == "held":
        lifted = cube + np.array([0.0, 0.0, rng.uniform(0.0, MAX_LIFT)])
        return env.set_scene(lifted, ON_CUBE, lifted, _yaw_quat(squared), turn)
    if category == "between_jaws":
        jaw = OPEN if rng.random() < 0.5 else ON_CUBE
        grip = cube + np.array([*rng.uniform(-0.005, 0.005, 2), rng.uniform(-0.005, 0.01)])
        return env.set_scene(grip, jaw, cube, _yaw_quat(squared), turn)
    if category == "pushed":
        angle = rng.uniform(-np.pi, np.pi)
        grip = cube + np.array([0.06 * np.cos(angle), 0.06 * np.sin(angle), rng.uniform(0.0, 0.04)])
        grip += np.array([*rng.uniform(-0.01, 0.01, 2), 0.0])
        return env.set_scene(grip, rng.uniform(0.0, OPEN), cube, _yaw_quat(rng.uniform(-np.pi, np.pi)), turn)
    if category == "tipped":
        axis = np.array([1.0, 0.0, 0.0]) if rng.random() < 0.5 else np.array([0.0, 1.0, 0.0])
        tip = np.array([np.cos(np.pi / 4), *(np.sin(np.pi / 4) * axis)])
        return env.set_scene(_free_gripper(rng, cube), rng.uniform(0.0, OPEN), cube,
                             _quat_mul(_yaw_quat(rng.uniform(-np.pi, np.pi)), tip), turn)
    raise ValueError(f"unknown coverage category {category!r}")

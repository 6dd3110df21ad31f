"""Layout of the 25-D Fetch observation and the render-relevant state key.

The key is what a rendered frame depends on (gripper position, finger widths, cube
position and rotation). The FAISS state cache (storage.cache) indexes keys, so the
scaling here decides what "near-duplicate" means: positions in metres, finger widths in
metres, cube Euler angles scaled by ROTATION_SCALE so one radian counts like the
displacement of a cube corner (half-diagonal of a 5 cm cube face, ~0.035 m).
"""

from __future__ import annotations

import numpy as np

from storage.key_spec import KeySpec

STATE_DIM = 25
GRIPPER_POS = slice(0, 3)
CUBE_POS = slice(3, 6)
CUBE_REL_POS = slice(6, 9)
FINGER_WIDTHS = slice(9, 11)
CUBE_ROT = slice(11, 14)
CUBE_VELP = slice(14, 17)
CUBE_VELR = slice(17, 20)
GRIPPER_VELP = slice(20, 23)
FINGER_VEL = slice(23, 25)

ROTATION_SCALE = 0.035
"""Metres per radian of cube rotation in the key."""

KEY_DIM = 11
KEY_FIELDS = (
    "gripper_x", "gripper_y", "gripper_z",
    "finger_l", "finger_r",
    "cube_x", "cube_y", "cube_z",
    "cube_rx", "cube_ry", "cube_rz",
)


def state_key(state: np.ndarray) -> np.ndarray:
    """Render-relevant key vectors from 25-D states: [..., 25] -> float32 [..., 11]."""
    s = np.asarray(state, dtype=np.float32)
    if s.shape[-1] != STATE_DIM:
        raise ValueError(f"state_key expects states of dimension {STATE_DIM}, got shape {s.shape}")
    return np.concatenate(
        [s[..., GRIPPER_POS], s[..., FINGER_WIDTHS], s[..., CUBE_POS], s[..., CUBE_ROT] * ROTATION_SCALE],
        axis=-1,
    ).astype(np.float32)


def gripper_cube_distance(state: np.ndarray) -> np.ndarray | float:
    """Euclidean gripper-cube distance (m) from 25-D states."""
    s = np.asarray(state, dtype=np.float64)
    d = np.linalg.norm(s[..., CUBE_REL_POS], axis=-1)
    return float(d) if d.ndim == 0 else d


CUBE_REST_HEIGHT = 0.42489
"""Height (m) of the cube centre resting on the Fetch table (the env's ``height_offset``;
the table is fixed, so this is a constant of the scene)."""


def lift_height(state: np.ndarray) -> np.ndarray | float:
    """Height (m) of the cube above its rest height, from 25-D states."""
    s = np.asarray(state, dtype=np.float64)
    h = s[..., CUBE_POS][..., 2] - CUBE_REST_HEIGHT
    return float(h) if h.ndim == 0 else h


def soft_target_geometry(states: np.ndarray) -> np.ndarray:
    """Features VLM-training soft targets compare (m): gripper-to-cube offset, finger opening, lift x3."""
    s = np.asarray(states, dtype=np.float32)
    lift = np.asarray(lift_height(s), dtype=np.float32)
    return np.concatenate([s[:, CUBE_REL_POS], s[:, FINGER_WIDTHS].sum(1, keepdims=True), 3 * lift[:, None]], axis=1)


KEY_SPEC = KeySpec("fetch_lift", 1, STATE_DIM, KEY_FIELDS, state_key, {"rotation_scale": ROTATION_SCALE})
"""The pick-and-lift key as stores and caches record it (stores written before key specs had
ids recorded ``{"fields", "rotation_scale"}``, which this spec matches)."""

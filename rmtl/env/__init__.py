"""Fetch pick-and-lift environment, camera bank, reverse curriculum and scripted expert."""

from __future__ import annotations

import gymnasium as gym

from rmtl import ENV_ID
from rmtl.env.cameras import CAMERA_BANK, SINGLE_VIEW, VIEW_NAMES, CameraSpec, resolve_views
from rmtl.env.curriculum import CurriculumStage, ReverseCurriculum
from rmtl.env.fetch_lift import EnvConfig, FetchPickAndLiftEnv
from rmtl.env.state import KEY_DIM, STATE_DIM, gripper_cube_distance, state_key

if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="rmtl.env.fetch_lift:FetchPickAndLiftEnv")

__all__ = [
    "CAMERA_BANK", "SINGLE_VIEW", "VIEW_NAMES", "CameraSpec", "resolve_views",
    "CurriculumStage", "ReverseCurriculum",
    "EnvConfig", "FetchPickAndLiftEnv",
    "KEY_DIM", "STATE_DIM", "gripper_cube_distance", "state_key",
]

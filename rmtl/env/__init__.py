"""Fetch pick-and-lift environment, camera bank and reverse curriculum (the task's state layout,
scripted expert and curriculum stages are in rmtl.tasks.fetch_lift)."""

from __future__ import annotations

import gymnasium as gym

from rmtl import ENV_ID
from rmtl.env.cameras import CAMERA_BANK, SINGLE_VIEW, VIEW_NAMES, CameraSpec, resolve_views
from rmtl.env.curriculum import CurriculumStage, ReverseCurriculum
from rmtl.env.fetch_lift import EnvConfig, FetchPickAndLiftEnv

if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="rmtl.env.fetch_lift:FetchPickAndLiftEnv")

__all__ = [
    "CAMERA_BANK", "SINGLE_VIEW", "VIEW_NAMES", "CameraSpec", "resolve_views",
    "CurriculumStage", "ReverseCurriculum",
    "EnvConfig", "FetchPickAndLiftEnv",
]

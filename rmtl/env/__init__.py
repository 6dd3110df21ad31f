"""Task-independent env parts: the camera bank and its renderer, the reverse curriculum, render
settings, culling and mesh levels of detail (the Fetch pick-and-lift env itself, its state
layout, scripted expert and curriculum stages are in rmtl.tasks.fetch_lift)."""

from __future__ import annotations

from rmtl.env.cameras import CAMERA_BANK, SINGLE_VIEW, VIEW_NAMES, CameraSpec, resolve_views
from rmtl.env.curriculum import CurriculumStage, ReverseCurriculum

__all__ = [
    "CAMERA_BANK", "SINGLE_VIEW", "VIEW_NAMES", "CameraSpec", "resolve_views",
    "CurriculumStage", "ReverseCurriculum",
]

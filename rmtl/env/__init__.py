"""Task-independent env parts: the camera-bank renderer, the reverse curriculum, render
settings, culling and mesh levels of detail (the Fetch pick-and-lift env itself, its camera
bank, state layout, scripted expert and curriculum stages are in rmtl.tasks.fetch_lift)."""

from __future__ import annotations

from rmtl.env.cameras import CameraBankRenderer, CameraSpec, resolve_views
from rmtl.env.curriculum import CurriculumStage, ReverseCurriculum

__all__ = [
    "CameraBankRenderer", "CameraSpec", "resolve_views",
    "CurriculumStage", "ReverseCurriculum",
]

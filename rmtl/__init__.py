"""RMTL: Reinforced Micro-task Learning with an offline-cached, phased multi-view VLM reward.

Importing the package selects headless EGL rendering for MuJoCo unless the user already
chose a backend; this must happen before ``mujoco`` is first imported anywhere.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
# PyOpenGL reads this to pick its platform; keep it consistent with MUJOCO_GL.
if os.environ["MUJOCO_GL"] == "egl":
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")

__version__ = "0.1.0"

ENV_ID = "rmtl/FetchPickAndLift-v0"

__all__ = ["ENV_ID", "__version__"]

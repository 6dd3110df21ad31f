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


def _register_env() -> None:
    """Register ENV_ID with Gymnasium on ``import rmtl`` (cheap: the env module and MuJoCo load
    only when it is made). Gymnasium >= 1.0 no longer discovers plugins through entry points;
    without importing rmtl first, ``gymnasium.make("rmtl:rmtl/FetchPickAndLift-v0")`` imports it."""
    import gymnasium as gym

    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="rmtl.tasks.fetch_lift.env:FetchPickAndLiftEnv")


_register_env()

__all__ = ["ENV_ID", "__version__"]

"""The pick-and-lift oracle progress: what a perfect scorer of each micro-task's prompt would say.

A diagnostic, not a VLM reward: it reads the privileged 25-D state. It answers one
question: does the phased reward (phase rule + per-micro-task score + the shaping) lead
PPO to the task when the scorer itself makes no mistakes? Each micro-task's progress is
the closeness of the state to the state its prompt describes, in [0, 1]:

- approach, "open jaws centred above a red cube": 1 - ||gripper - (cube + approach_height z)|| / approach_scale;
- align, "pinching a red cube between two fingers": 1 - (gripper-cube distance) / align_scale;
- grasp, "lifting a red cube between its fingers": lift / lift_target while the gripper is
  within grasp_distance of the cube (0 otherwise).

Each is clipped to [0, 1]. Such a scorer passes the project's reward gates perfectly
(within-phase ranks of 1 with minus the distance for approach and align, grasp AUC 1), and
like any scorer of these prompts its active score falls where the rule switches to the
next micro-task, whose goal is further away. See docs/stage1.md, "Oracle-scored diagnostic".
"""

from __future__ import annotations

import numpy as np

from rmtl.tasks.fetch_lift.phases import ALIGN, APPROACH, GRASP, PHASES
# The oracle kind's progress config: its goals and scales are this function's parameters (read below the tasks).
from rmtl.reward.kinds.oracle import OracleProgressConfig
from rmtl.tasks.fetch_lift.state import CUBE_POS, GRIPPER_POS, gripper_cube_distance, lift_height


def oracle_progress(states: np.ndarray, config: OracleProgressConfig | None = None) -> np.ndarray:
    """Progress of 25-D states [N, 25] toward each micro-task's goal -> float64 [N, K] in task order."""
    cfg = config or OracleProgressConfig()
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    goal_above = s[:, CUBE_POS] + np.array([0.0, 0.0, cfg.approach_height])
    d_above = np.linalg.norm(s[:, GRIPPER_POS] - goal_above, axis=-1)
    d = np.asarray(gripper_cube_distance(s), dtype=np.float64).reshape(-1)
    lift = np.asarray(lift_height(s), dtype=np.float64).reshape(-1)
    out = np.zeros((s.shape[0], len(PHASES)), dtype=np.float64)
    out[:, APPROACH] = 1.0 - d_above / cfg.approach_scale
    out[:, ALIGN] = 1.0 - d / cfg.align_scale
    out[:, GRASP] = np.where(d <= cfg.grasp_distance, lift / cfg.lift_target, 0.0)
    return np.clip(out, 0.0, 1.0)


__all__ = ["OracleProgressConfig", "oracle_progress"]

"""The phased reward with a perfect scorer read from the state in place of the VLM (a diagnostic).

Everything but the scorer is RMTL's: the phase rule, the active micro-task's score, the
shaper and the success bonus. The score of micro-task k is ``initial_low + (initial_high -
initial_low) * progress_k`` with ``progress`` from the task's oracle, so a fresh shaper's u
equals the progress. It reads privileged state: it tells whether a VLM run's failure lies in
the scorer or in the rest of the reward, and is never a VLM result.
"""

from __future__ import annotations

from typing import Literal
from collections.abc import Callable

import numpy as np
from pydantic import Field

from rmtl.config import Config
from rmtl.reward.config import RewardKindConfig
from rmtl.reward.kinds import register_kind
from rmtl.reward.kinds.base import KindStep, RewardKind, RunFacts, shaped_terms
from rmtl.reward.shaping import RewardShaper, ShapingConfig

Progress = Callable[[np.ndarray], np.ndarray]
"""states [N, state_dim] -> progress toward each micro-task's goal, [N, K] in [0, 1]."""


class OracleProgressConfig(Config):
    """Goal states and length scales of the oracle progress (docs/stage1.md): the parameters of the
    task's ``Task.oracle_progress`` (pick-and-lift's, rmtl.tasks.fetch_lift.oracle_progress). Defined
    here, with its kind, because the kind's config is read below the tasks."""

    approach_height: float = Field(0.05, ge=0)
    """Height (m) above the cube centre of the approach goal (the env's easy pose)."""
    approach_scale: float = Field(0.5, gt=0)
    """Distance (m) to the approach goal at which approach progress reaches 0 (about the largest
    gripper-cube distance of a random start)."""
    align_scale: float = Field(0.15, gt=0)
    """Gripper-cube distance (m) at which align progress reaches 0 (the align bin's outer edge)."""
    lift_target: float = Field(0.02, gt=0)
    """Lift (m) at which grasp progress reaches 1 (the task's success lift)."""
    grasp_distance: float = Field(0.04, gt=0)
    """Gripper-cube distance (m) within which lift counts as grasp progress (the grasp bin)."""


class OracleRewardConfig(RewardKindConfig):
    """The oracle-scored diagnostic: RMTL's shaping of a perfect state-reading scorer's scores."""

    kind: Literal["oracle"] = "oracle"
    shaping: ShapingConfig = ShapingConfig()
    """The shaping of the scores (as a VLM run's; its initial bounds set the scores' scale)."""
    add_env_reward: bool = True
    """Add the environment's own reward (the +1 success bonus) to the shaped reward."""
    progress: OracleProgressConfig = OracleProgressConfig()
    """The oracle scorer's goal states and scales."""


@register_kind("oracle", config=OracleRewardConfig)
class OracleKind(RewardKind):
    progress_source = "scores"
    privileged = True

    def __init__(self, progress: Progress, num_phases: int, initial_low: float = 0.45, initial_high: float = 0.70,
                 add_env_reward: bool = True):
        self.progress = progress
        self.num_phases = int(num_phases)
        self.low, self.high = float(initial_low), float(initial_high)
        self.add_env_reward = add_env_reward

    @classmethod
    def build(cls, reward: OracleRewardConfig, task, facts: RunFacts, *, vlm=None, source=None) -> OracleKind:
        import functools

        from rmtl.errors import ConfigError

        if task.oracle_progress is None:
            raise ConfigError(f"task {task.name!r} defines no oracle progress; reward kind 'oracle' needs one "
                              "(Task.oracle_progress), or train it with another reward kind")
        return cls(functools.partial(task.oracle_progress, config=reward.progress), len(task.micro_tasks.names),
                   reward.shaping.initial_low, reward.shaping.initial_high, reward.add_env_reward)

    def scores(self, states: np.ndarray) -> np.ndarray:
        """Oracle scores [N, K] on the scale of the shaping's initial bounds."""
        return self.low + (self.high - self.low) * np.asarray(self.progress(states), dtype=np.float64)

    def step(self, states: np.ndarray, phases: np.ndarray, shaper: RewardShaper, render) -> KindStep:
        scores = self.scores(states)
        # One whole-task score (a single-score kind) is active whatever the rule's phase says.
        active = scores[:, 0] if scores.shape[1] == 1 else scores[np.arange(states.shape[0]), phases]
        out = shaper(active, phases)
        terms = shaped_terms(out, active)
        terms["scores"] = scores.astype(np.float32)
        return KindStep(out.reward, terms)

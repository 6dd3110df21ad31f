"""The phased reward with a perfect scorer read from the state in place of the VLM (a diagnostic).

Everything but the scorer is RMTL's: the phase rule, the active micro-task's score, the
shaper and the success bonus. The score of micro-task k is ``initial_low + (initial_high -
initial_low) * progress_k`` with ``progress`` from the task's oracle, so a fresh shaper's u
equals the progress. It reads privileged state: it tells whether a VLM run's failure lies in
the scorer or in the rest of the reward, and is never a VLM result.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from rmtl.reward.kinds import register_kind
from rmtl.reward.kinds.base import KindStep, RewardKind, shaped_terms
from rmtl.reward.shaping import RewardShaper

Progress = Callable[[np.ndarray], np.ndarray]
"""states [N, state_dim] -> progress toward each micro-task's goal, [N, K] in [0, 1]."""


@register_kind("oracle")
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
    def from_run(cls, run, task, *, reward, vlm=None, source=None) -> "OracleKind":
        import functools

        from rmtl.errors import ConfigError

        if task.oracle_progress is None:
            raise ConfigError(f"task {task.name!r} defines no oracle progress; reward_kind 'oracle' needs one "
                              "(Task.oracle_progress), or train it with another reward_kind")
        return cls(functools.partial(task.oracle_progress, config=run.oracle), len(task.micro_tasks.names),
                   reward.shaping.initial_low, reward.shaping.initial_high, run.dense.add_env_reward)

    def scores(self, states: np.ndarray) -> np.ndarray:
        """Oracle scores [N, K] on the scale of the shaping's initial bounds."""
        return self.low + (self.high - self.low) * np.asarray(self.progress(states), dtype=np.float64)

    def step(self, states: np.ndarray, phases: np.ndarray, shaper: RewardShaper, render) -> KindStep:
        scores = self.scores(states)
        active = scores[np.arange(states.shape[0]), phases]
        out = shaper(active, phases)
        terms = shaped_terms(out, active)
        terms["scores"] = scores.astype(np.float32)
        return KindStep(out.reward, terms)

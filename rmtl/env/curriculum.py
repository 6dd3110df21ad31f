"""Reverse curriculum over a scalar difficulty (paper section 3.4, App. A;
definition and stage table: docs/env.md, "Reverse curriculum").

A pure object: feed it episode outcomes, read the current stage and sample a difficulty.
It does not touch the environment; a training callback connects the two.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from rmtl.errors import ConfigError


@dataclass(frozen=True)
class CurriculumStage:
    """One stage: nominal difficulty, the range u is drawn from, and its exit gate."""

    difficulty: float
    """Nominal difficulty d of the stage (for reports)."""
    d_min: float
    """Lower bound of the uniform draw of u."""
    d_max: float
    """Upper bound of the uniform draw of u."""
    success_threshold: float | None
    """Success rate over the window needed to advance; None for the final, ungated stage."""
    min_episodes: int
    """Episodes that must be played in this stage before the gate is checked."""


class ReverseCurriculum:
    """Stage-gated reverse curriculum.

    The stage advances when at least ``min_episodes`` episodes were played in it, the
    success window (of the episodes of this stage) is full, and its success rate reaches
    the stage threshold. The window is cleared on advancing, so a stage is judged only by
    its own episodes. The final stage never advances. ``stages`` are the task's
    (``Task.curriculum_stages``; pick-and-lift's: rmtl.tasks.fetch_lift.curriculum_stages).
    """

    def __init__(self, stages: tuple[CurriculumStage, ...], window: int = 100, start_stage: int = 0):
        if not stages:
            raise ConfigError("curriculum needs at least one stage")
        if window < 1:
            raise ConfigError(f"curriculum window must be >= 1 episode, got {window}")
        for i, st in enumerate(stages):
            if not 0.0 <= st.d_min <= st.d_max <= 1.0:
                raise ConfigError(f"curriculum stage {i}: need 0 <= d_min <= d_max <= 1, got [{st.d_min}, {st.d_max}]")
        if not 0 <= start_stage < len(stages):
            raise ConfigError(f"start_stage must be in [0, {len(stages) - 1}], got {start_stage}")
        self.stages = tuple(stages)
        self.window = window
        self.stage_index = start_stage
        self._outcomes: deque[bool] = deque(maxlen=window)
        self.episodes_in_stage = 0
        self.total_episodes = 0
        self.history: list[tuple[int, int]] = []
        """(total episodes at entry, stage index) for every stage entered after the first."""

    @property
    def stage(self) -> CurriculumStage:
        return self.stages[self.stage_index]

    @property
    def is_final(self) -> bool:
        return self.stage_index == len(self.stages) - 1

    @property
    def success_rate(self) -> float:
        """Success rate over the current window (0 when empty)."""
        return float(np.mean(self._outcomes)) if self._outcomes else 0.0

    def record(self, success: bool) -> bool:
        """Record one finished episode; returns True if this advanced the stage."""
        self._outcomes.append(bool(success))
        self.episodes_in_stage += 1
        self.total_episodes += 1
        st = self.stage
        if self.is_final or st.success_threshold is None:
            return False
        if self.episodes_in_stage < st.min_episodes or len(self._outcomes) < self.window:
            return False
        if self.success_rate < st.success_threshold:
            return False
        self.stage_index += 1
        self._outcomes.clear()
        self.episodes_in_stage = 0
        self.history.append((self.total_episodes, self.stage_index))
        return True

    def sample_difficulty(self, rng: np.random.Generator) -> float:
        """Draw u ~ U[d_min, d_max] of the current stage."""
        st = self.stage
        return float(rng.uniform(st.d_min, st.d_max))

    def state_dict(self) -> dict:
        return {
            "stage_index": self.stage_index,
            "outcomes": list(self._outcomes),
            "episodes_in_stage": self.episodes_in_stage,
            "total_episodes": self.total_episodes,
            "history": list(self.history),
        }

    def load_state_dict(self, state: dict) -> None:
        self.stage_index = int(state["stage_index"])
        self._outcomes = deque((bool(x) for x in state["outcomes"]), maxlen=self.window)
        self.episodes_in_stage = int(state["episodes_in_stage"])
        self.total_episodes = int(state["total_episodes"])
        self.history = [tuple(h) for h in state["history"]]

"""Which micro-task is active: the Stage-1 rule (a task's ``Task.phases``; pick-and-lift's is
the distance rule), or phases supplied from outside.

The reward wrapper asks a :class:`PhaseSelector` once per step for all envs; the
Stage-2 manager plugs in through :class:`ExternalPhaseSelector` (it sets the phases it
chose before the step) or by implementing the protocol itself.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from rmtl.errors import ConfigError


@runtime_checkable
class PhaseSelector(Protocol):
    """Maps the states [N, state_dim] (and step infos) of N envs to phase ids int64 [N]."""

    def __call__(self, states: np.ndarray, infos: Sequence[Mapping[str, Any]]) -> np.ndarray: ...


class RulePhaseSelector:
    """A phase rule of the state alone (works on stored states too): ``rule`` maps states
    [N, S] to phase ids [N]; it is the task's ``Task.phases`` (pick-and-lift's: the distance
    rule, docs/reward.md, "Phase selection"), which also checks the state width."""

    def __init__(self, rule: Callable[[np.ndarray], np.ndarray]):
        self.rule = rule

    def __call__(self, states: np.ndarray, infos: Sequence[Mapping[str, Any]] = ()) -> np.ndarray:
        return np.asarray(self.rule(np.asarray(states)), dtype=np.int64)


class ExternalPhaseSelector:
    """Returns the phases last given to :meth:`set` (e.g. by a learned manager); ids are in
    [0, num_phases), ``num_phases`` being the task's number of micro-tasks."""

    def __init__(self, num_envs: int, num_phases: int, initial: int = 0):
        self.num_phases = int(num_phases)
        self._phases = np.full(int(num_envs), int(initial), dtype=np.int64)
        self.set(self._phases)

    def set(self, phases: np.ndarray | Sequence[int]) -> None:
        p = np.asarray(phases, dtype=np.int64).reshape(-1)
        if p.shape != self._phases.shape or np.any((p < 0) | (p >= self.num_phases)):
            raise ConfigError(f"phases must be {self._phases.shape[0]} ids in [0, {self.num_phases - 1}], "
                              f"got {p.tolist()}")
        self._phases = p.copy()

    def __call__(self, states: np.ndarray, infos: Sequence[Mapping[str, Any]] = ()) -> np.ndarray:
        return self._phases.copy()

"""A task's micro-tasks as data: names in task order, goal prompts, and the threshold rule
that selects one from a scalar measure of the state (a YAML file per task); and the phase
one-hot, which any number of micro-tasks shares.

Words: the k-th micro-task of a task *is* phase k (docs/architecture.md, "Phases and
micro-tasks"); a phase id is the index of a micro-task name in ``MicroTaskSpec.names``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
import yaml

from rmtl.errors import ConfigError


def _phrasings(value: Any, where: str) -> tuple[str, ...]:
    texts = (value,) if isinstance(value, str) else tuple(value or ())
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise ConfigError(f"{where} must be a non-empty text or list of texts")
    return texts


@dataclass(frozen=True)
class MicroTaskSpec:
    """Micro-tasks (``names``, index = phase id), their goal phrasings, the baseline and single
    global goal, and the rule: the first ``(micro-task, max)`` bin whose bound the measure is
    at or below selects that micro-task, else ``otherwise``."""

    names: tuple[str, ...]
    goals: dict[str, tuple[str, ...]]
    baseline: tuple[str, ...]
    single: tuple[str, ...]
    measure: str
    bins: tuple[tuple[str, float], ...]
    otherwise: str

    @classmethod
    def from_yaml(cls, path: str | Path) -> MicroTaskSpec:
        p = Path(path)
        try:
            d = yaml.safe_load(p.read_text())
            names = tuple(str(m["name"]) for m in d["micro_tasks"])
            goals = {str(m["name"]): _phrasings(m["goal"], f"{p}: goal of {m['name']}") for m in d["micro_tasks"]}
            rule = d["phase_rule"]
            bins = tuple((str(b["micro_task"]), float(b["max"])) for b in rule["bins"])
            spec = cls(names, goals, _phrasings(d["baseline"], f"{p}: baseline"),
                       _phrasings(d.get("single", d["baseline"]), f"{p}: single"), str(rule["measure"]), bins,
                       str(rule["otherwise"]))
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{p} is not a micro-task spec ({type(e).__name__}: {e}); see docs/architecture.md") from None
        unknown = sorted({m for m, _ in bins} - set(names) | ({spec.otherwise} - set(names)))
        if unknown or len(set(names)) != len(names):
            raise ConfigError(f"{p}: the phase rule names micro-tasks {unknown} not listed, or names repeat: {names}")
        if [b for _, b in bins] != sorted(b for _, b in bins):
            raise ConfigError(f"{p}: phase-rule bins must have ascending bounds, got {bins}")
        return spec

    def bound(self, name: str) -> float:
        """Upper bound of micro-task ``name``'s bin."""
        return dict(self.bins)[name]

    def phase(self, measure: float | np.ndarray) -> int | np.ndarray:
        """Phase ids the rule selects for measures (scalar -> int, array -> int64 array)."""
        m = np.asarray(measure, dtype=np.float64)
        phase = np.full(m.shape, self.names.index(self.otherwise), dtype=np.int64)
        for name, bound in reversed(self.bins):  # the lowest bound wins where bins overlap
            phase = np.where(m <= bound, self.names.index(name), phase)
        return int(phase) if phase.ndim == 0 else phase.astype(np.int64)

    def describe(self) -> str:
        """The rule in words (stores record it)."""
        parts = [f"{name} if d <= {bound}" for name, bound in self.bins]
        return f"{self.measure} d: {', '.join(parts)}, else {self.otherwise}"


def micro_task_indices(names: Sequence[str], chosen: Sequence[str], source: str) -> tuple[int, ...]:
    """Indices in ``names`` of the ``chosen`` micro-task names; a ConfigError names ``source`` (the
    flag or config field they came from) and the task's own names."""
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise ConfigError(f"{source} names {unknown}; this task's micro-tasks are {', '.join(names)}")
    twice = next((n for i, n in enumerate(chosen) if n in list(chosen)[:i]), None)
    if twice is not None:
        raise ConfigError(f"{source} names {twice!r} more than once ({', '.join(chosen)}); give each micro-task once")
    return tuple(list(names).index(n) for n in chosen)


def phase_one_hot(phase: int | np.ndarray, num_phases: int) -> np.ndarray:
    """One-hot float32 encoding of phase ids (scalar -> [K], array [...] -> [..., K]) for K = ``num_phases``."""
    p = np.asarray(phase, dtype=np.int64)
    return np.eye(num_phases, dtype=np.float32)[p]

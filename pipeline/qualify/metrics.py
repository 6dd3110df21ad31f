"""The learnability map's metrics of a scorer (its axes), per family and pooled with episode-bootstrap
intervals."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np

from pipeline.qualify.families import StateSet
from rmtl.errors import ConfigError


def map_axes(task: Any) -> tuple[str, ...]:
    """The task's map axes, in order (``Task.map_axes``); one line for a task that defines none."""
    if not task.map_axes:
        raise ConfigError(f"task {task.name!r} defines no learnability-map axes (Task.map_axes); it cannot be qualified")
    return tuple(task.map_axes)


def early_axes(task: Any) -> tuple[str, ...]:
    """The names of the task's early-progress axes (``Task.early_progress_axes``); none when it has none."""
    return tuple(getattr(task, "early_progress_axes", None) or ())


def early_progress_axes(task: Any, scores: np.ndarray | None, rows: StateSet, held_out: np.ndarray, shaping: Any,
                        learner_families: Sequence[str]) -> dict[str, float]:
    """The task's early-progress axes of a reward's scores [N, K] (or [N, 1]) on the held-out rows, its
    shaper's bounds replayed on the learner families' episodes (every row when the set has no learners)."""
    if scores is None or task.early_progress_metrics is None:
        return {}
    learners = np.isin(rows.family, list(learner_families))
    pick = learners if learners.any() else np.ones(len(rows.states), dtype=bool)
    replay = (scores[pick], rows.states[pick], rows.episode[pick], rows.step[pick])
    return task.early_progress_metrics(scores[held_out], rows.states[held_out], replay=replay, shaping=shaping)


def better(task: Any) -> dict[str, int]:
    """Which way each of the task's map axes improves (+1: higher is better)."""
    return {k: a.better for k, a in task.map_axes.items()}


def no_scorer_metrics(task: Any) -> dict[str, float]:
    """Where a reward without a scorer (rule-only: a constant score) sits on the task's map."""
    return {k: a.chance for k, a in task.map_axes.items()}


def __getattr__(name: str) -> Any:
    # METRICS, BETTER and NO_SCORER_METRICS: the default task's, for scripts that tabulate its map.
    values = {"METRICS": map_axes, "BETTER": better, "NO_SCORER_METRICS": no_scorer_metrics}
    if name not in values:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rmtl.tasks import get_task

    return values[name](get_task())


BOOTSTRAP = 200
"""Episode resamples of a pooled metric's interval."""


def scorer_metrics(task: Any, scores: np.ndarray | None, rows: StateSet, mask: np.ndarray | None = None) -> dict[str, float]:
    """The map's metrics (``Task.map_axes``) of scores [N, K] on the rows in ``mask`` (all by default),
    as the task defines them (``Task.scorer_metrics``); a reward without a scorer sits at chance."""
    m = np.ones(len(rows.states), dtype=bool) if mask is None else mask
    if scores is None:
        return no_scorer_metrics(task)
    if task.scorer_metrics is None:
        raise ConfigError(f"task {task.name!r} defines no scorer metrics (Task.scorer_metrics); it cannot be qualified")
    return task.scorer_metrics(scores[m], rows.states[m], rows.episode[m], rows.step[m])


def pooled_metrics(task: Any, scores: np.ndarray | None, rows: StateSet, mask: np.ndarray,
                   seed: int = 0) -> dict[str, Any]:
    """Metrics over the rows in ``mask`` with 95% intervals from episode resamples."""
    point = scorer_metrics(task, scores, rows, mask)
    if scores is None:
        return {"value": point, "ci": {k: [v, v] for k, v in point.items()}}
    eps = np.unique(rows.episode[mask])
    rng = np.random.default_rng(seed)
    by_ep = {e: np.flatnonzero(rows.episode == e) for e in eps}
    axes = map_axes(task)
    draws: dict[str, list[float]] = {k: [] for k in axes}
    for _ in range(BOOTSTRAP):
        pick = rng.choice(eps, size=len(eps), replace=True)
        idx = np.concatenate([by_ep[e] for e in pick])
        # Resampled episodes get new ids so repeats stay separate episodes.
        new_ep = np.concatenate([np.full(len(by_ep[e]), j) for j, e in enumerate(pick)])
        sub = StateSet(rows.states[idx], new_ep, rows.step[idx], rows.success[idx], rows.family[idx])
        vals = scorer_metrics(task, scores[idx], sub)
        for k in axes:
            draws[k].append(vals[k])
    ci = {k: [float(np.nanpercentile(v, 2.5)), float(np.nanpercentile(v, 97.5))] if np.isfinite(v).any()
          else [float("nan")] * 2 for k, v in ((k, np.asarray(d, dtype=float)) for k, d in draws.items())}
    return {"value": point, "ci": ci}

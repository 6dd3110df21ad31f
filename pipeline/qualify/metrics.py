"""The learnability map's metrics of a scorer (its axes), per family and pooled with episode-bootstrap
intervals."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.qualify.families import StateSet
from rmtl.errors import ConfigError


METRICS = ("approach_rank", "align_rank", "grasp_auc", "right_prompt", "resting_grasp_pay", "noise_ratio")
"""The map's axes, in this order (RULE.md of results/learnability)."""


BETTER = {"approach_rank": 1, "align_rank": 1, "grasp_auc": 1, "right_prompt": 1, "resting_grasp_pay": -1,
          "noise_ratio": -1}
"""Which way each axis improves (+1: higher is better)."""


NO_SCORER_METRICS = {"approach_rank": 0.0, "align_rank": 0.0, "grasp_auc": 0.5, "right_prompt": 1 / 3,
                     "resting_grasp_pay": 1.0, "noise_ratio": 0.0}
"""Where a reward without a scorer (rule-only: a constant score) sits on the map: no rank, grasp at
chance, one prompt in three right by chance, a resting cube paid like a lifted one, no noise."""


BOOTSTRAP = 200
"""Episode resamples of a pooled metric's interval."""


def scorer_metrics(task: Any, scores: np.ndarray | None, rows: StateSet, mask: np.ndarray | None = None) -> dict[str, float]:
    """The map's metrics (``METRICS``) of scores [N, K] on the rows in ``mask`` (all by default), as
    the task defines them (``Task.scorer_metrics``); a reward without a scorer sits at chance."""
    m = np.ones(len(rows.states), dtype=bool) if mask is None else mask
    if scores is None:
        return dict(NO_SCORER_METRICS)
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
    draws = {k: [] for k in METRICS}
    for _ in range(BOOTSTRAP):
        pick = rng.choice(eps, size=len(eps), replace=True)
        idx = np.concatenate([by_ep[e] for e in pick])
        # Resampled episodes get new ids so repeats stay separate episodes.
        new_ep = np.concatenate([np.full(len(by_ep[e]), j) for j, e in enumerate(pick)])
        sub = StateSet(rows.states[idx], new_ep, rows.step[idx], rows.success[idx], rows.family[idx])
        vals = scorer_metrics(task, scores[idx], sub)
        for k in METRICS:
            draws[k].append(vals[k])
    ci = {k: [float(np.nanpercentile(v, 2.5)), float(np.nanpercentile(v, 97.5))] if np.isfinite(v).any()
          else [float("nan")] * 2 for k, v in ((k, np.asarray(d, dtype=float)) for k, d in draws.items())}
    return {"value": point, "ci": ci}

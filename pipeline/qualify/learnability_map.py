"""The learnability map: its one schema (:class:`LearnabilityMap`, written by ``rmtl qualify
fit-map`` and read by ``rmtl qualify``), its verdict for a scorer's metrics (with the support
guard), the replayed error of a model, and the map's plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import Field, model_validator

from rmtl.config import Config
from rmtl.errors import ConfigError


MAP_VERSION = 1
"""The map file's schema version; a map of another version is refused in one line (refit it)."""

Number = Annotated[float, Field(strict=True)]
"""A number as JSON writes one (an integer or a float; NaN where a metric was not measured), never a
string or a boolean read as one."""
Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A finite number: the fit's coefficients and intercepts, the runs' outcomes, the threshold."""
Count = Annotated[int, Field(strict=True, ge=0)]


class MappedCondition(Config):
    """A condition of the map (or a check of it): its metrics (mean over its seeds' error
    landscapes) and its finished runs' outcomes (test success)."""

    name: str
    metrics: dict[str, Number]
    outcomes: list[Finite] = []
    seeds_done: Count = 0
    verdict: dict[str, Any] | None = None
    """A check's: the verdict the map gives its metrics."""


class LogisticFit(Config):
    """P(teaches) = sigmoid(z . coef + intercept), z the metrics standardised by ``mean`` and ``scale``."""

    mean: list[Number]
    scale: list[Number]
    coef: list[Finite]
    intercept: Finite
    bootstrap_coef: list[list[Finite]]
    bootstrap_intercept: list[Finite]


class LearnabilityMap(Config):
    """A fitted learnability map (the task's ``learnability_map.json``). The fit's fields sit at
    the top (``mean`` ... ``bootstrap_intercept``); ``fitted`` says whether they are there."""

    version: Annotated[int, Field(strict=True)]
    axes: list[str]
    better: dict[str, Annotated[int, Field(strict=True)]]
    """Which way each axis improves (+1: higher is better), as the task's ``map_axes`` say."""
    teaches_at: Finite
    """Test success from which a run teaches."""
    conditions: list[MappedCondition]
    runs: Count = 0
    complete_conditions: Count = 0
    fitted: Annotated[bool, Field(strict=True)]
    why: str | None = None
    """Why the map is not fitted."""
    mean: list[Number] | None = None
    scale: list[Number] | None = None
    coef: list[Finite] | None = None
    intercept: Finite | None = None
    bootstrap_coef: list[list[Finite]] | None = None
    bootstrap_intercept: list[Finite] | None = None
    support: dict[str, Number] = {}
    """Per axis, the worst value among the runs that taught (:func:`map_support`)."""
    provisional: LogisticFit | None = None
    """A fit on incomplete runs, for the plots only."""
    checks: list[MappedCondition] = []

    @model_validator(mode="after")
    def _complete(self) -> LearnabilityMap:
        if self.version != MAP_VERSION:
            raise ValueError(f"schema version {self.version}, this rmtl reads version {MAP_VERSION}")
        if set(self.better) != set(self.axes):
            raise ValueError("better must name every axis")
        if any(v not in (1, -1) for v in self.better.values()):
            raise ValueError("better gives each axis +1 (higher is better) or -1")
        if self.fitted:
            fit = self.fit
            if fit is None or not all(len(v) == len(self.axes) for v in (fit.mean, fit.scale, fit.coef)):
                raise ValueError("a fitted map needs mean, scale, coef (one per axis), intercept and the bootstrap")
        return self

    @property
    def fit(self) -> LogisticFit | None:
        """The logistic fit at the top of the map (None when it is not there)."""
        fields = {k: getattr(self, k) for k in LogisticFit.model_fields}
        return None if any(v is None for v in fields.values()) else LogisticFit(**fields)

    def to_json(self) -> str:
        """The map file's text (fields left unset are left out)."""
        data = self.model_dump()
        data = {k: v for k, v in data.items() if v is not None}
        for key in ("conditions", "checks"):
            data[key] = [{k: v for k, v in c.items() if v is not None} for c in data[key]]
        return json.dumps(data, indent=1)


BASE_STEPS = 300_000
"""The budget of the map's first runs: :func:`budget` is 0 there."""
PIXEL_STEPS = 600_000
"""The budget of a pixel run: verdicts of a map with the budget feature are read there (budget 1)."""
FEATURES = ("budget", "phased")
"""The two features a map fitted with early-progress axes adds after them: the run's budget, and
whether the reward is phased (1) or one score (0)."""


def budget(steps: int) -> float:
    """A run's budget as the map reads it: log2(steps / 300k), so 300k -> 0 and 600k -> 1."""
    return float(np.log2(max(int(steps), 1) / BASE_STEPS))


def map_inputs(pooled: Mapping[str, float], early: Mapping[str, float] | None, *, one_score: bool,
               steps: int = PIXEL_STEPS) -> dict[str, float]:
    """What a map reads of a reward: its pooled axes, its early-progress axes, the budget of a run of
    ``steps`` and its form (phased or one score). A map reads only the axes it has."""
    return {**pooled, **(early or {}), "budget": budget(steps), "phased": 0.0 if one_score else 1.0}


def load_map(path: Path | None = None) -> LearnabilityMap | None:
    """The fitted learnability map at ``path`` (default: the default task's, ``Task.learnability_map``);
    None when there is none. A map of another schema is one ConfigError line."""
    if path is None:
        from rmtl.tasks import get_task

        path = get_task().learnability_map
    if path is None or not Path(path).is_file():
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"learnability map {path} is not readable JSON ({type(e).__name__}); refit it with "
                          "'rmtl qualify fit-map'") from None
    version = data.get("version") if isinstance(data, dict) else None
    if version != MAP_VERSION:
        raise ConfigError(f"learnability map {path} has schema version {version}, this rmtl reads version "
                          f"{MAP_VERSION}; refit it with 'rmtl qualify fit-map'")
    try:
        return LearnabilityMap.make(**data)
    except ConfigError as e:
        raise ConfigError(f"learnability map {path} does not follow its schema: {e}; refit it with "
                          "'rmtl qualify fit-map'") from None


def map_support(points: Sequence[tuple[Mapping[str, float], float]], teaches_at: float,
                better: Mapping[str, int]) -> dict[str, float]:
    """Per axis, the worst value among the map's runs (metrics, test success) that taught (worse by ``better``)."""
    out: dict[str, float] = {}
    for axis, sign in better.items():
        taught = [sign * m[axis] for m, o in points if o >= teaches_at and np.isfinite(m.get(axis, np.nan))]
        if taught:
            out[axis] = float(sign * min(taught))
    return out


def outside_support(metrics: Mapping[str, float], taught_worst: Mapping[str, float], better: Mapping[str, int]) -> list[str]:
    """The axes on which ``metrics`` are worse than every run of the map that taught. A scorer teaches
    only if every axis is good enough, so there a "teaches" verdict would rest on the logistic map's
    extrapolation alone. ("Does not teach" needs one bad axis and is not held back this way.)"""
    return [f"{axis} {metrics[axis]:.2f} is worse than every run that taught ({limit:.2f})"
            for axis, limit in taught_worst.items()
            if np.isfinite(metrics.get(axis, np.nan)) and better[axis] * (metrics[axis] - limit) < -1e-9]


def standardised(fit: LogisticFit, axes: Sequence[str], metrics: Mapping[str, float]) -> np.ndarray:
    """``metrics`` on ``axes`` in the fit's standard units (an axis not measured sits at the fit's average, 0)."""
    x = np.array([metrics.get(a, np.nan) for a in axes], dtype=float)
    return np.nan_to_num((x - np.asarray(fit.mean)) / np.asarray(fit.scale), nan=0.0)


def fit_probability(fit: LogisticFit, axes: Sequence[str], metrics: Mapping[str, float]) -> tuple[float, float, float]:
    """P(teaches) of ``metrics`` under a logistic fit, with the 90% interval of its bootstrap refits."""
    z = standardised(fit, axes, metrics)

    def prob(coef: Any, intercept: float) -> float:
        return float(1.0 / (1.0 + np.exp(-(float(z @ np.asarray(coef)) + intercept))))

    probs = [prob(c, i) for c, i in zip(fit.bootstrap_coef, fit.bootstrap_intercept)]
    p = prob(fit.coef, fit.intercept)
    lo, hi = (float(np.percentile(probs, 5)), float(np.percentile(probs, 95))) if probs else (p, p)
    return p, lo, hi


def interval_verdict(lo: float, hi: float) -> str:
    """The verdict of a 90% interval of P(teaches): teaches at or above 0.5, does not teach below, else uncertain."""
    return "teaches" if lo >= 0.5 else "does not teach" if hi < 0.5 else "uncertain"


def map_verdict(metrics: Mapping[str, float], fitted: LearnabilityMap | None) -> dict[str, Any]:
    """Where ``metrics`` sit on the fitted map: P(teaches) with its interval, the verdict and the nearest
    conditions. A "teaches" that the map's runs do not support on some axis (``outside_support``) is
    held at "uncertain": a linear map fitted on few runs must not promise by extrapolation."""
    if fitted is None or not fitted.fitted:
        why = "no map has been fitted yet" if fitted is None else (fitted.why or "the map is not fitted")
        return {"verdict": "unmapped", "why": why}
    fit = fitted.fit
    assert fit is not None  # a fitted map has its fit (LearnabilityMap checks it)
    axes = fitted.axes
    p, lo, hi = fit_probability(fit, axes, metrics)
    mean, scale = np.asarray(fit.mean), np.asarray(fit.scale)
    z = standardised(fit, axes, metrics)
    verdict = interval_verdict(lo, hi)
    beyond = outside_support(metrics, fitted.support, fitted.better) if verdict == "teaches" else []
    if beyond:
        verdict = "uncertain"
    conds = fitted.conditions
    cz = (np.array([[c.metrics.get(a, np.nan) for a in axes] for c in conds]) - mean) / scale
    d = np.sqrt(np.nansum((cz - z[None, :]) ** 2, axis=1))
    near = [conds[i] for i in np.argsort(d)[:3]]
    outcomes = [o for c in near for o in c.outcomes]
    return {"verdict": verdict, "p_teaches": p, "p_interval_90": [lo, hi],
            "predicted_test_success": float(np.mean([np.mean(c.outcomes) for c in near])),
            "predicted_range": [float(min(outcomes)), float(max(outcomes))] if outcomes else None,
            "nearest_conditions": [c.name for c in near],
            **({"why": "outside the map's runs: " + "; ".join(beyond)} if beyond else {})}


def scorer_verdict(metrics: Mapping[str, float], beats: Sequence[str], fitted: LearnabilityMap | None) -> dict[str, Any]:
    """The map's verdict, held at "uncertain" when a degenerate behaviour (``beats``) earns the expert's return:
    a map of error sizes cannot promise that a reward with an exploit teaches."""
    verdict = map_verdict(metrics, fitted)
    if beats and verdict["verdict"] == "teaches":
        verdict = {**verdict, "verdict": "uncertain", "why": f"{', '.join(beats)} earn the noise-free expert's return"}
    return verdict


def maps_one_score(fitted: LearnabilityMap | None) -> bool:
    """Whether the map was fitted on one-score rewards too (it has the ``phased`` feature), so it can
    give a single-prompt configuration a verdict."""
    return fitted is not None and "phased" in fitted.axes


def reward_verdict(pooled: Mapping[str, float], early: Mapping[str, float] | None, beats: Sequence[str],
                   fitted: LearnabilityMap | None, *, one_score: bool) -> dict[str, Any]:
    """The verdict of a reward as a run configures it (:func:`map_inputs` at a pixel run's budget, then
    :func:`scorer_verdict`); "unmapped" for a one-score reward on a map that holds no one-score runs."""
    if one_score and not maps_one_score(fitted):
        return {"verdict": "unmapped", "why": "the map holds no runs of a one-score reward (refit it with "
                "'rmtl qualify fit-map --early-progress' on runs of one), so compare its early-progress axes"}
    return scorer_verdict(map_inputs(pooled, early, one_score=one_score), beats, fitted)


def fit_replayed_error(scores: np.ndarray, progress: np.ndarray, phases: np.ndarray, episode: np.ndarray, step: np.ndarray,
                       confused: np.ndarray, names: tuple[str, ...], confused_pay: float, *, confusion: str,
                       confused_task: str) -> dict:
    """The ``degraded_oracle`` error that reproduces a scorer: ``{"error": reward.error section, "fit": the
    per-micro-task lines}`` from its ``scores`` [N, K] against the oracle's ``progress`` [N, K] on rows
    with rule ``phases``, ``episode`` / ``step`` ids and the mask of the states the task's scorer
    confusion ``confusion`` pays as ``confused_task``'s goal (``Task.scorer_confusions``; pick-and-lift's
    ``grasp_resting``: a cube resting at the gripper). Per micro-task: scores mapped to progress units
    by a least-squares line; i.i.d. noise from step-to-step changes of the residual along episodes
    (var / 2, an upper bound); the systematic error from the rest of its variance; a negative slope
    means inverted; for the confused micro-task the line leaves out the confused states. The
    confusion's strength is the scorer's measured ``confused_pay`` (a map axis, which equals the
    strength for a degraded oracle): a line through a nearly flat or non-linear score maps confused
    states unstably (fitted that way, ``rmtl-fetch-fast-r5`` paying a resting cube 0.98 of a lift
    came out at 0.19)."""
    per_task, fit = {}, {}
    for k, name in enumerate(names):
        m = phases == k
        line = m & ~confused if name == confused_task else m
        p, s = progress[line, k], scores[line, k]
        if len(p) < 10 or np.ptp(p) == 0:
            continue
        b, a = np.polyfit(p, s, 1)
        inverted = b < 0
        b = abs(b) if abs(b) > 1e-9 else 1e-9
        r = (scores[m, k] - a) / b * (-1 if inverted else 1) - (1 - progress[m, k] if inverted else progress[m, k])
        order = np.lexsort((step[m], episode[m]))
        e_sorted, r_sorted = episode[m][order], r[order]
        same = e_sorted[1:] == e_sorted[:-1]
        dr = np.diff(r_sorted)[same]
        noise = float(np.sqrt(np.var(dr) / 2)) if len(dr) > 2 else 0.0
        systematic = float(np.sqrt(max(np.var(r) - noise ** 2, 0.0)))
        per_task[name] = {"systematic": round(systematic, 4), "noise": round(noise, 4),
                          "inverted_share": 1.0 if inverted else 0.0}
        fit[name] = {"intercept": float(a), "slope": float(b) * (-1 if inverted else 1), "rows": int(m.sum())}
    error = {"micro_tasks": per_task}
    strength = float(np.clip(confused_pay, 0.0, 1.0)) if np.isfinite(confused_pay) else 0.0
    if strength > 0:
        error["confusions"] = {confusion: round(strength, 4)}
    return {"error": error, "fit": fit}


def plot_map(fitted: LearnabilityMap | None, points: Mapping[str, Mapping[str, float]], path: Path, plane: Any) -> Path:
    """The 2-D view of the map (``plane``: the task's ``Task.map_plane``): each mapped run coloured by
    whether it taught, and the qualified scorers' points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    teaches_at = fitted.teaches_at if fitted is not None else 0.5
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    if fitted is not None:
        for c in fitted.conditions:
            x, y = plane.point(c.metrics)
            for o in c.outcomes:
                ax.scatter(x, y, c="tab:green" if o >= teaches_at else "tab:red", alpha=0.6, s=30)
            ax.annotate(c.name, (x, y), fontsize=6, alpha=0.7)
    for name, m in points.items():
        x, y = plane.point(m)
        ax.scatter(x, y, marker="*", s=180, c="black")
        ax.annotate(name, (x, y), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel(plane.x_label)
    ax.set_ylabel(plane.y_label)
    ax.set_title(f"learnability map: green taught (test success >= {teaches_at:g} at 300k), red did not")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

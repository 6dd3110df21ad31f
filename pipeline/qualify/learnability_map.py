"""The learnability map: loading the fitted map, its verdict for a scorer's metrics (with the support
guard), the replayed error of a model, and the map's plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pipeline.qualify.metrics import BETTER


def load_map(path: Path | None = None) -> dict | None:
    """The fitted learnability map at ``path`` (default: the default task's, ``Task.learnability_map``);
    None when there is none."""
    if path is None:
        from rmtl.tasks import get_task

        path = get_task().learnability_map
    if path is None or not Path(path).is_file():
        return None
    return json.loads(path.read_text())


def map_support(points: Sequence[tuple[Mapping[str, float], float]], teaches_at: float) -> dict[str, float]:
    """Per axis, the worst value among the map's runs (metrics, test success) that taught (worse by ``BETTER``)."""
    out: dict[str, float] = {}
    for axis, sign in BETTER.items():
        taught = [sign * m[axis] for m, o in points if o >= teaches_at and np.isfinite(m.get(axis, np.nan))]
        if taught:
            out[axis] = float(sign * min(taught))
    return out


def outside_support(metrics: Mapping[str, float], taught_worst: Mapping[str, float]) -> list[str]:
    """The axes on which ``metrics`` are worse than every run of the map that taught. A scorer teaches
    only if every axis is good enough, so there a "teaches" verdict would rest on the logistic map's
    extrapolation alone. ("Does not teach" needs one bad axis and is not held back this way.)"""
    return [f"{axis} {metrics[axis]:.2f} is worse than every run that taught ({limit:.2f})"
            for axis, limit in taught_worst.items()
            if np.isfinite(metrics.get(axis, np.nan)) and BETTER[axis] * (metrics[axis] - limit) < -1e-9]


def map_verdict(metrics: Mapping[str, float], fitted: Mapping[str, Any] | None) -> dict[str, Any]:
    """Where ``metrics`` sit on the fitted map: P(teaches) with its interval, the verdict and the nearest
    conditions. A "teaches" that the map's runs do not support on some axis (``outside_support``) is
    held at "uncertain": a linear map fitted on few runs must not promise by extrapolation."""
    if fitted is None or not fitted.get("fitted"):
        why = "no map has been fitted yet" if fitted is None else fitted.get("why", "the map is not fitted")
        return {"verdict": "unmapped", "why": why}
    axes = fitted["axes"]
    x = np.array([[metrics.get(a, np.nan) for a in axes]], dtype=float)
    mean, scale = np.asarray(fitted["mean"]), np.asarray(fitted["scale"])
    z = np.nan_to_num((x[0] - mean) / scale, nan=0.0)  # an unmeasured axis sits at the map's average

    def prob(coef: Any, intercept: float) -> float:
        return float(1.0 / (1.0 + np.exp(-(float(z @ np.asarray(coef)) + intercept))))

    probs = [prob(c, i) for c, i in zip(fitted["bootstrap_coef"], fitted["bootstrap_intercept"])]
    p = prob(fitted["coef"], fitted["intercept"])
    lo, hi = (float(np.percentile(probs, 5)), float(np.percentile(probs, 95))) if probs else (p, p)
    verdict = "teaches" if lo >= 0.5 else "does not teach" if hi < 0.5 else "uncertain"
    beyond = outside_support(metrics, fitted.get("support") or {}) if verdict == "teaches" else []
    if beyond:
        verdict = "uncertain"
    conds = fitted["conditions"]
    cz = (np.array([[c["metrics"].get(a, np.nan) for a in axes] for c in conds]) - mean) / scale
    d = np.sqrt(np.nansum((cz - z[None, :]) ** 2, axis=1))
    near = [conds[i] for i in np.argsort(d)[:3]]
    outcomes = [o for c in near for o in c["outcomes"]]
    return {"verdict": verdict, "p_teaches": p, "p_interval_90": [lo, hi],
            "predicted_test_success": float(np.mean([np.mean(c["outcomes"]) for c in near])),
            "predicted_range": [float(min(outcomes)), float(max(outcomes))] if outcomes else None,
            "nearest_conditions": [c["name"] for c in near],
            **({"why": "outside the map's runs: " + "; ".join(beyond)} if beyond else {})}


def scorer_verdict(metrics: Mapping[str, float], beats: Sequence[str], fitted: Mapping[str, Any] | None) -> dict[str, Any]:
    """The map's verdict, held at "uncertain" when a degenerate behaviour (``beats``) earns the expert's return:
    a map of error sizes cannot promise that a reward with an exploit teaches."""
    verdict = map_verdict(metrics, fitted)
    if beats and verdict["verdict"] == "teaches":
        verdict = {**verdict, "verdict": "uncertain", "why": f"{', '.join(beats)} earn the noise-free expert's return"}
    return verdict


def fit_replayed_error(scores: np.ndarray, progress: np.ndarray, phases: np.ndarray, episode: np.ndarray, step: np.ndarray,
                       resting: np.ndarray, names: tuple[str, ...], resting_pay: float) -> dict:
    """The ``degraded_oracle`` error that reproduces a scorer: ``{"error": reward.error section, "fit": the
    per-micro-task lines}`` from its ``scores`` [N, K] against the oracle's ``progress`` [N, K] on rows
    with rule ``phases``, ``episode`` / ``step`` ids and the ``resting`` (cube at the gripper, on the
    table) mask. Per micro-task: scores mapped to progress units by a least-squares line; i.i.d. noise
    from step-to-step changes of the residual along episodes (var / 2, an upper bound); the systematic
    error from the rest of its variance; a negative slope means inverted; for grasp the line leaves
    out resting states. The ``grasp_resting`` strength is the scorer's measured ``resting_pay`` (the
    map's own axis, which equals the strength for a degraded oracle): a line through a nearly flat
    or non-linear grasp score maps resting states unstably (fitted that way, ``rmtl-fetch-fast-r5``
    paying a resting cube 0.98 of a lift came out at 0.19)."""
    per_task, fit = {}, {}
    for k, name in enumerate(names):
        m = phases == k
        line = m & ~resting if name == "grasp" else m
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
    strength = float(np.clip(resting_pay, 0.0, 1.0)) if np.isfinite(resting_pay) else 0.0
    if strength > 0:
        error["confusions"] = {"grasp_resting": round(strength, 4)}
    return {"error": error, "fit": fit}


def plot_map(fitted: Mapping[str, Any] | None, points: Mapping[str, Mapping[str, float]], path: Path) -> Path:
    """The 2-D view of the map (grasp AUC against min(approach, align) rank): each mapped run coloured
    by whether it taught, and the qualified scorers' points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    if fitted is not None:
        for c in fitted.get("conditions", []):
            m = c["metrics"]
            x, y = m.get("grasp_auc", np.nan), min(m.get("approach_rank", np.nan), m.get("align_rank", np.nan))
            for o in c["outcomes"]:
                ax.scatter(x, y, c="tab:green" if o >= 0.5 else "tab:red", alpha=0.6, s=30)
            ax.annotate(c["name"], (x, y), fontsize=6, alpha=0.7)
    for name, m in points.items():
        x, y = m.get("grasp_auc", np.nan), min(m.get("approach_rank", np.nan), m.get("align_rank", np.nan))
        ax.scatter(x, y, marker="*", s=180, c="black")
        ax.annotate(name, (x, y), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("grasp AUC (qualification set, pooled)")
    ax.set_ylabel("min(approach rank, align rank)")
    ax.set_title("learnability map: green taught (test success >= 0.5 at 300k), red did not")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

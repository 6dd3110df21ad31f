"""Reward-quality metrics from stored embeddings (no rendering): does a VLM's phased
reward track task progress *within* each phase, by how much, and from which views?

Everything is measured within a rule phase, never across phases: a reward that is only
constant per phase (what a random-weight model gives) must not look good. Rank metrics
are always reported with the score spread (p5-p95), since tiny score differences can
still rank perfectly.
"""

from __future__ import annotations

import numpy as np

from rmtl.tasks.fetch_lift.phases import ALIGN, APPROACH, GRASP, PHASES, rule_phase
from rmtl.reward.projection import DEFAULT_ALPHA, goal_baseline_scores
from rmtl.reward.quality_stats import roc_auc, spearman, spread, step_variation
from rmtl.task import MapAxis, MapPlane, QualityInputs
from rmtl.tasks.fetch_lift.captions import PROMPT_SITUATION, SITUATION_NAMES, situation_ids
from rmtl.tasks.fetch_lift.state import gripper_cube_distance, lift_height

LIFTED = 0.02
"""Cube height above rest (m) from which a state counts as lifted (the success lift)."""
RESTING = 0.005
"""Cube height above rest (m) below which it counts as resting on the table."""


def phase_metrics(scores: np.ndarray, states: np.ndarray) -> dict[str, float]:
    """Within-phase metrics of micro-task scores [N, K] (K = approach, align, grasp)."""
    dist = np.asarray(gripper_cube_distance(states))
    lift = np.asarray(lift_height(states))
    phase = rule_phase(dist)
    out: dict[str, float] = {}
    for k, name, in ((APPROACH, "approach"), (ALIGN, "align")):
        m = phase == k
        out[f"{name}_spearman"] = spearman(scores[m, k], -dist[m])
        out[f"{name}_spread"] = spread(scores[m, k])
        out[f"{name}_count"] = int(m.sum())
    g = phase == GRASP
    lifted, resting = g & (lift >= LIFTED), g & (lift < RESTING)
    out["grasp_auc"] = roc_auc(scores[lifted, GRASP], scores[resting, GRASP])
    out["grasp_spread"] = spread(scores[g, GRASP])
    out["grasp_lifted_mean"] = float(scores[lifted, GRASP].mean()) if lifted.any() else float("nan")
    out["grasp_resting_mean"] = float(scores[resting, GRASP].mean()) if resting.any() else float("nan")
    out["grasp_count"] = int(g.sum())
    # Right prompt: on states showing what a prompt describes, that prompt must score highest.
    sit = situation_ids(states)
    right, total = 0, 0
    for k, name in enumerate(PHASES):
        m = sit == SITUATION_NAMES.index(PROMPT_SITUATION[name])
        right += int((scores[m].argmax(axis=1) == k).sum())
        total += int(m.sum())
        out[f"right_prompt_{name}_count"] = int(m.sum())
    out["right_prompt_accuracy"] = right / total if total else float("nan")
    return out


def reward_quality(inputs: QualityInputs, goals: np.ndarray, baseline: np.ndarray, alpha: float = DEFAULT_ALPHA) -> dict:
    """Metrics for the multi-view mean and for every single view."""
    per_view = goal_baseline_scores(inputs.embeddings, goals, baseline, alpha)  # [N, V, K]
    mean = per_view.mean(axis=1)
    dist = np.asarray(gripper_cube_distance(inputs.states))
    phase = rule_phase(dist)
    rows = np.arange(len(phase))
    result = {"alpha": alpha, "rows": int(len(phase)), "mean": phase_metrics(mean, inputs.states)}
    # Why a prompt may win everywhere: a goal close to the baseline scores higher on every
    # image under the projection (pipeline.train_vlm.baseline_balance_penalty).
    cosine = np.asarray(goals, dtype=np.float64) @ np.asarray(baseline, dtype=np.float64).reshape(-1)
    result["goal_baseline_cosine"] = {name: float(c) for name, c in zip(PHASES, cosine)}
    result["mean"]["step_variation"] = step_variation(mean[rows, phase], inputs.episode, inputs.step, phase)
    result["views"] = {}
    for v, name in enumerate(inputs.views):
        m = phase_metrics(per_view[:, v], inputs.states)
        m["step_variation"] = step_variation(per_view[rows, v, phase], inputs.episode, inputs.step, phase)
        result["views"][name] = m
    return result


def map_metrics(scores: np.ndarray, states: np.ndarray, episode: np.ndarray, step: np.ndarray) -> dict[str, float]:
    """The learnability map's metrics of scores [N, K] (docs/reward_quality.md): approach and align
    rank, grasp AUC, right prompt, resting-grasp pay and noise ratio."""
    from rmtl.tasks.fetch_lift.scorer_errors import resting_at_gripper

    pm = phase_metrics(scores, states)
    phase = rule_phase(np.asarray(gripper_cube_distance(states)))
    rows = np.arange(len(phase))
    # Resting pay: the grasp score of a cube resting at the gripper, from the grasp score's floor
    # (its 5th percentile over every state) to a lifted cube's (0: paid like the floor, 1: like a lift).
    rest = resting_at_gripper(states) & (phase == GRASP)
    lifted = (phase == GRASP) & (np.asarray(lift_height(states)) >= LIFTED)
    pay = float("nan")
    if rest.any() and lifted.any():
        floor = np.percentile(scores[:, GRASP], 5)
        span = scores[lifted, GRASP].mean() - floor
        pay = float((scores[rest, GRASP].mean() - floor) / span) if abs(span) > 1e-12 else float("nan")
    sv = step_variation(scores[rows, phase], episode, step, phase)
    spreads = [spread(scores[phase == k, k]) for k in range(scores.shape[1]) if (phase == k).any()]
    ratio = float(sv / np.mean(spreads)) if spreads and np.mean(spreads) > 0 else float("nan")
    return {"approach_rank": pm["approach_spearman"], "align_rank": pm["align_spearman"], "grasp_auc": pm["grasp_auc"],
            "right_prompt": pm["right_prompt_accuracy"], "resting_grasp_pay": pay, "noise_ratio": ratio}


MAP_AXES = {
    "approach_rank": MapAxis(better=1, chance=0.0),
    "align_rank": MapAxis(better=1, chance=0.0),
    "grasp_auc": MapAxis(better=1, chance=0.5),
    "right_prompt": MapAxis(better=1, chance=1 / len(PHASES)),  # one micro-task's prompt in K by chance
    "resting_grasp_pay": MapAxis(better=-1, chance=1.0),  # a constant score pays a resting cube like a lift
    "noise_ratio": MapAxis(better=-1, chance=0.0),
}
"""The map's axes (:func:`map_metrics`, in that order), which way each improves, and where a
reward without a scorer sits: no rank, grasp at chance, one prompt in K right, no noise."""


def _map_point(metrics) -> tuple[float, float]:
    nan = float("nan")
    return (metrics.get("grasp_auc", nan), min(metrics.get("approach_rank", nan), metrics.get("align_rank", nan)))


MAP_PLANE = MapPlane("grasp AUC (qualification set, pooled)", "min(approach rank, align rank)", _map_point)
"""The map's 2-D view: grasp AUC against the worse of the approach and align ranks."""


GATES = {
    "approach_spearman": 0.8,
    "align_spearman": 0.9,
    "grasp_auc": 0.9,
    "right_prompt_accuracy": 0.95,
}
"""Acceptance thresholds of a domain reward model on held-out expert episodes
(definitions: docs/reward_vlm.md, "Acceptance gates")."""


def gate_report(metrics: dict, random_metrics: dict | None = None) -> dict[str, bool]:
    """Which acceptance checks pass (spread checks need the random model's metrics)."""
    m = metrics["mean"]
    passed = {k: bool(np.nan_to_num(m[k], nan=-1) >= v) for k, v in GATES.items()}
    if random_metrics is not None:
        r = random_metrics["mean"]
        for name in ("approach", "align", "grasp"):
            passed[f"{name}_spread_10x_random"] = bool(m[f"{name}_spread"] >= 10 * r[f"{name}_spread"])
    views = metrics["views"].values()
    for key in ("approach_spearman", "align_spearman", "grasp_auc", "right_prompt_accuracy"):
        best = max(np.nan_to_num(v[key], nan=-1) for v in views)
        passed[f"mean_ge_best_view_{key}"] = bool(np.nan_to_num(m[key], nan=-1) >= best - 1e-9)
    passed["mean_smoother_than_every_view"] = all(m["step_variation"] < v["step_variation"] for v in views)
    return passed

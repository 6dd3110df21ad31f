"""What a reward pays for the first steps of progress in each phase (definitions:
docs/reward_quality.md, "Early-progress axes").

A learner climbs a reward from where it is: at the start of a lift, a few centimetres into an
approach or an alignment. These axes measure, for the score a run's reward actually pays in
each rule phase (its *active* score: the rule phase's micro-task score, or the one score of a
single-prompt reward, which is active in every phase), the gain over the first steps of
progress in units of the score's spread among states of equal progress (a signal-to-noise
ratio), and the same gain after the reward's own normalisation (the shaper's tracking bounds,
replayed on the learners' states as a run would see them), in units of the band ``u`` spans.

- grasp: rows in the grasp bin; a cube lifted 0.5-2 cm (the climb before the success lift pays
  its bonus) against a cube resting at the gripper (lift < 0.5 cm); spread: pooled within the
  resting rows and 0.5 cm bins of lift;
- approach: rows in the approach bin; gripper-cube distance 25-30 cm against 35-40 cm (the
  first 10 cm of an approach from a random start); spread: pooled within the two 5 cm bands;
- align: rows in the align bin; 8-11 cm against 12-15 cm; spread: pooled within the two bands.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rmtl.tasks.fetch_lift.phases import ALIGN, APPROACH, GRASP, rule_phase
from rmtl.tasks.fetch_lift.state import gripper_cube_distance, lift_height

RESTING_LIFT = 0.005
"""Lift (m) below which the cube rests on the table."""
EARLY_LIFT = (0.005, 0.02)
"""Lifts (m) of the first centimetres of a lift, below the task's success lift."""
LIFT_BIN = 0.005
"""Width (m) of the equal-progress bins of lift."""
APPROACH_BANDS = ((0.35, 0.40), (0.25, 0.30))
"""Gripper-cube distances (m): where an approach starts, and 10 cm further on."""
ALIGN_BANDS = ((0.12, 0.15), (0.08, 0.11))
"""Gripper-cube distances (m): where the align bin starts, and 4 cm further on."""
SNR_CAP = 10.0
"""Early-progress SNRs are clipped to [-cap, cap]: beyond it more signal teaches nothing more, and
a noiseless scorer's SNR would be unbounded."""
MIN_ROWS = 5
"""Rows each side of a comparison needs; fewer gives NaN."""

EARLY_AXES = ("grasp_early_snr", "approach_early_snr", "align_early_snr",
              "grasp_early_u", "approach_early_u", "align_early_u")
"""The axes :func:`early_progress_metrics` reports, in order."""


def active_scores(scores: np.ndarray, states: np.ndarray) -> np.ndarray:
    """The score a run's reward pays at each state [N]: the rule phase's column of micro-task
    scores [N, K], or the one score of a single-goal reward [N, 1] whatever the phase."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"scores must be [N, K], got shape {s.shape}")
    if s.shape[1] == 1:
        return s[:, 0]
    phase = rule_phase(np.asarray(gripper_cube_distance(states)))
    return s[np.arange(len(s)), phase]


def _groups(states: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray, list[np.ndarray]]]:
    """Per phase: (rows before progress, rows after the first progress, equal-progress groups)."""
    d = np.asarray(gripper_cube_distance(states), dtype=np.float64).reshape(-1)
    lift = np.asarray(lift_height(states), dtype=np.float64).reshape(-1)
    phase = rule_phase(d)
    g = phase == GRASP
    resting = g & (lift < RESTING_LIFT)
    early = g & (lift >= EARLY_LIFT[0]) & (lift < EARLY_LIFT[1])
    edges = np.arange(EARLY_LIFT[0], EARLY_LIFT[1] + 1e-9, LIFT_BIN)
    bins = [early & (lift >= a) & (lift < b) for a, b in zip(edges[:-1], edges[1:])]
    out = {"grasp": (resting, early, [resting, *bins])}
    for name, k, (far, near) in (("approach", APPROACH, APPROACH_BANDS), ("align", ALIGN, ALIGN_BANDS)):
        m = phase == k
        before = m & (d >= far[0]) & (d < far[1])
        after = m & (d >= near[0]) & (d < near[1])
        out[name] = (before, after, [before, after])
    return out


def _pooled_sd(values: np.ndarray, groups: list[np.ndarray]) -> float:
    parts = [values[m] for m in groups if m.sum() >= 2]
    dof = sum(len(p) - 1 for p in parts)
    if dof <= 0:
        return float("nan")
    return float(np.sqrt(sum(((p - p.mean()) ** 2).sum() for p in parts) / dof))


def _gain(values: np.ndarray, before: np.ndarray, after: np.ndarray) -> float:
    if before.sum() < MIN_ROWS or after.sum() < MIN_ROWS:
        return float("nan")
    return float(values[after].mean() - values[before].mean())


def _snr(gain: float, sd: float) -> float:
    """gain / sd clipped to the cap; a gain over no spread at all is the cap (with its sign)."""
    if not np.isfinite(gain):
        return float("nan")
    if not np.isfinite(sd) or sd <= 1e-9:
        return 0.0 if abs(gain) <= 1e-9 else float(np.sign(gain) * SNR_CAP)
    return float(np.clip(gain / sd, -SNR_CAP, SNR_CAP))


def settled_bounds(active: np.ndarray, phases: np.ndarray, episode: np.ndarray, step: np.ndarray,
                   shaping: Any = None, num_phases: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """The tracking bounds (low [K], high [K]) a run's shaper ends with after seeing these rows'
    active scores in episode order (one env; bounds carry over episodes as in training)."""
    from rmtl.reward.shaping import RewardShaper, ShapingConfig

    shaper = RewardShaper(1, shaping or ShapingConfig(), num_phases=num_phases)
    order = np.lexsort((step, episode))
    prev = None
    for i in order:
        if prev is not None and episode[i] != episode[prev]:
            shaper.reset(np.array([True]))
        shaper(np.array([active[i]]), np.array([phases[i] if num_phases > 1 else 0]))
        prev = i
    return shaper.low[0].copy(), shaper.high[0].copy()


def early_progress_metrics(scores: np.ndarray, states: np.ndarray, *, replay: tuple[np.ndarray, ...] | None = None,
                           shaping: Any = None) -> dict[str, float]:
    """The early-progress axes (:data:`EARLY_AXES`) of scores [N, K] (K micro-tasks or one score) on
    states [N, 25]. ``replay``: (scores, states, episode, step) of the learners' rows whose replay
    settles the shaper's bounds (default: these rows in one episode each, in order)."""
    states = np.atleast_2d(np.asarray(states, dtype=np.float64))
    active = active_scores(scores, states)
    num_phases = np.asarray(scores).shape[1]
    groups = _groups(states)
    out: dict[str, float] = {}
    for name, (before, after, equal) in groups.items():
        out[f"{name}_early_snr"] = _snr(_gain(active, before, after), _pooled_sd(active, equal))
    r_scores, r_states, r_episode, r_step = replay if replay is not None else (
        scores, states, np.arange(len(states)), np.zeros(len(states), dtype=np.int64))
    r_states = np.atleast_2d(np.asarray(r_states, dtype=np.float64))
    r_phase = rule_phase(np.asarray(gripper_cube_distance(r_states)))
    low, high = settled_bounds(active_scores(r_scores, r_states), r_phase, np.asarray(r_episode),
                               np.asarray(r_step), shaping, num_phases)
    phase = rule_phase(np.asarray(gripper_cube_distance(states)))
    k = np.zeros(len(states), dtype=np.int64) if num_phases == 1 else phase
    u = np.clip((active - low[k]) / np.maximum(high[k] - low[k], 1e-6), 0.0, 1.0)
    for name, (before, after, _) in groups.items():
        out[f"{name}_early_u"] = _gain(u, before, after)
    return out


__all__ = ["EARLY_AXES", "active_scores", "early_progress_metrics", "settled_bounds"]

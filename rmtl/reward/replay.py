"""Reward replay: the shaped rewards and discounted returns a reward gives stored episodes,
offline, by running the trainer's own :class:`~rmtl.reward.shaping.RewardShaper` over scores in
step order. The analyses, the exports, ``rmtl qualify`` and ``rmtl view`` replay rewards through this module.

- one shaper env sees the episodes one after another; the trend/momentum history restarts
  with each episode, the adaptive bounds carry over;
- ``bounds="adapted"`` (default) holds each phase's bounds where the running bounds of a long
  training run on these states end up (:func:`adapted_bounds`): tracking bounds (the default
  shaping) settle near a low and a high percentile of the phase's scores, taken as its p1 / p99,
  and are then held fixed, so every episode is scored on one scale whatever its order; bounds
  that only widen end at [min(0.45, lowest score), max(0.70, highest score)].
  ``bounds="running"`` starts them at 0.45 / 0.70, as a fresh training run does, and lets them
  move as in training;
- a return is sum_t gamma^t r_t with the +1 success bonus on the last step of a successful
  episode (what PPO with gamma 0.95 sees); rule-only rewards are the band at u = 0.5 (no scorer).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np

from rmtl.errors import ConfigError
from rmtl.reward.shaping import RewardShaper, ShapingConfig

BOUNDS = ("adapted", "running")
ADAPTED_PERCENTILES = (1.0, 99.0)
"""Where tracking bounds settle on a fixed set of states (docs/reward.md): held fixed offline."""


def adapted_bounds(active: np.ndarray, phases: np.ndarray, shaping: Any, num_phases: int) -> dict[int, tuple[float, float]]:
    """Per phase: the bounds a long training run on these scores ends up with (module docstring)."""
    k = np.zeros(len(active), dtype=np.int64) if num_phases == 1 else np.asarray(phases, dtype=np.int64)
    out = {}
    for p in np.unique(k):
        a = np.asarray(active)[k == p]
        if shaping.bounds == "tracking":
            lo, hi = np.percentile(a, ADAPTED_PERCENTILES)
            out[int(p)] = (float(lo), float(max(hi, lo + 1e-6)))
        else:
            out[int(p)] = (min(shaping.initial_low, float(a.min())), max(shaping.initial_high, float(a.max())))
    return out


def offline_shaping(shaping: Any, bounds: str) -> Any:
    """The shaping an offline pass runs: adapted tracking bounds are held fixed (their steady state)."""
    return shaping.replace(bounds="fixed") if bounds == "adapted" and shaping.bounds == "tracking" else shaping


def shaped_rewards(active: np.ndarray, phases: np.ndarray, episodes: Sequence[np.ndarray], shaping: Any,
                   num_phases: int, bounds: str = "adapted") -> np.ndarray:
    """Shaped reward of every row: one RewardShaper env fed ``episodes`` (row-index arrays in
    step order) one after another, reset between them; ``bounds`` as in the module docstring."""
    return shaped_terms(active, phases, episodes, shaping, num_phases, bounds, names=("reward",))["reward"]


def shaped_terms(active: np.ndarray, phases: np.ndarray, episodes: Sequence[np.ndarray], shaping: Any,
                 num_phases: int, bounds: str = "adapted", names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """:func:`shaped_rewards` with every term of the shaper's output by name (``reward`` and
    :meth:`~rmtl.reward.shaping.ShapingOutput.named`: u, level, each shaping term, delta, low, high;
    ``names``: only these), each float64 [rows]; rows of no episode hold NaN (``reward``: 0)."""
    if bounds not in BOUNDS:
        raise ConfigError(f"bounds must be one of {', '.join(BOUNDS)}, got {bounds!r}")
    # Episodes are independent when the bounds cannot carry anything over: adapted bounds
    # never move (no score lies outside them), fixed bounds neither, and reset bounds start
    # afresh. Then one shaper env per episode, stepped in lockstep, gives the same rewards
    # as the sequential pass (tested) in max-length steps instead of one call per row.
    # Running tracking bounds move with the scores, so they carry state across episodes.
    run_shaping = offline_shaping(shaping, bounds)
    lockstep = (run_shaping.bounds == "fixed" or shaping.reset_bounds_on_episode
                or (bounds == "adapted" and shaping.bounds == "widen_only"))
    n_envs = max(1, len(episodes)) if lockstep else 1
    shaper = RewardShaper(n_envs, run_shaping, num_phases=num_phases)
    if bounds == "adapted" and shaping.bounds != "fixed":
        for p, (lo, hi) in adapted_bounds(active, phases, shaping, num_phases).items():
            shaper.low[:, p], shaper.high[:, p] = lo, hi
    out: dict[str, np.ndarray] = {}
    phases = np.asarray(phases, dtype=np.int64)

    def keep(rows: np.ndarray, shaped: Any, live: Any = slice(None)) -> None:
        for name, values in {"reward": shaped.reward, **shaped.named()}.items():
            if names is not None and name not in names:
                continue
            if name not in out:
                out[name] = np.zeros(len(active)) if name == "reward" else np.full(len(active), np.nan)
            out[name][rows[live]] = values[live]

    if lockstep and len(episodes):
        shaper.reset()
        lengths = np.array([len(idx) for idx in episodes])
        for t in range(int(lengths.max())):
            live = lengths > t
            # finished episodes repeat their last row (their rewards are not kept)
            rows = np.array([idx[min(t, len(idx) - 1)] if len(idx) else 0 for idx in episodes], dtype=np.int64)
            keep(rows, shaper(active[rows], phases[rows]), live)
    else:
        for idx in episodes:
            shaper.reset()
            for i in idx:
                keep(np.array([i]), shaper(active[i : i + 1], phases[i : i + 1]))
    out.setdefault("reward", np.zeros(len(active)))
    return out


GAMMA = 0.95


def rule_only_rewards(phases: np.ndarray, episodes: Sequence[np.ndarray], num_phases: int) -> np.ndarray:
    """Rule-only reward of every row: a fresh one-env shaper per episode, u held at 0.5."""
    out = np.zeros(len(phases))
    for idx in episodes:
        shaper = RewardShaper(1, ShapingConfig(), num_phases=num_phases)
        for i in idx:
            out[i] = shaper.shape_u(np.array([0.5]), phases[i:i + 1]).reward[0]
    return out


def discounted_returns(rewards: np.ndarray, episodes: Sequence[np.ndarray], success: Sequence[bool],
                       gamma: float = GAMMA) -> np.ndarray:
    """[E] discounted return of each episode (rows ``episodes[e]`` of ``rewards``), +1 on success."""
    out = []
    for idx, ok in zip(episodes, success):
        r = np.asarray(rewards[idx], dtype=np.float64).copy()
        if ok:
            r[-1] += 1.0
        out.append(float(np.sum(r * gamma ** np.arange(len(r)))))
    return np.array(out)

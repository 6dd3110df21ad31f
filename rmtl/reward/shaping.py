"""Reward shaping of the active micro-task score (definition and reasons: docs/reward.md).

Per step, with s the aggregate score of the active micro-task k of K, the phase-banded
shaping is (the default keeps steps 1-3 and 6: level only; Table 1's trend, momentum and drop
penalty are options that the pre-registered oracle sweep left out of the default):

0. (option, off by default) s is averaged over the env's last ``score_window`` steps in k;
1. bounds: one pair (lo_k, hi_k) per micro-task, shared by every env of the learner.
   With m and M the min and max of micro-task k's scores over the last ``bound_window``
   steps (all envs that were in k), lo_k moves toward m and hi_k toward M, at
   ``bound_rate`` when that widens the range and at ``contraction_rate`` when it narrows
   it, so the bounds settle near a low and a high percentile of the micro-task's scores;
2. u = clip((s - lo_k) / (hi_k - lo_k), 0, 1);
3. level L = (k + u) / K - 1 (the band: continuous at a switch when u reaches 1 before it
   and starts at 0 after it);
4. the shaping terms (:mod:`rmtl.reward.shaping_terms`): trend = L - mean(previous <= window L
   this episode); momentum m <- decay m + (1 - decay) (L - previous L) (both 0 without history);
5. delta = the sum of the switched-on terms times their weights (w_t trend + w_m momentum), times
   drop_multiplier when negative;
6. reward = clip(L + delta, -1, 0).

The per-micro-task reconstruction (v1) of Table 1 stays a labelled option (``band: false,
bounds: widen_only`` with trend, momentum and drop penalty on): level u - 1, bounds per env and micro-task that only widen toward
the current score, trend and momentum per micro-task on u (differences of u - 1).

With one micro-task (K = 1, the single-prompt baselines) there is one pair of bounds and
one history, and the phase ids given with the scores are ignored: no phase index can reach
the reward.

Episode history (each term's, e.g. the trend window, momentum, previous level) is reset with the episode; the
bounds are running statistics over training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal
from collections.abc import Mapping

import numpy as np
from pydantic import Field, model_validator

from rmtl.config import Config
from rmtl.errors import ConfigError
from rmtl.provenance import json_safe
from rmtl.reward.shaping_terms import SHAPING_TERMS, ShapingTerm

REWARD_LOW, REWARD_HIGH = -1.0, 0.0


class ShapingConfig(Config):
    """Switches and parameters of the shaping (defaults: the phase-banded shaping, Table 1's numbers)."""

    terms: ClassVar[tuple[type[ShapingTerm], ...]] = SHAPING_TERMS
    """The terms of delta this config has fields for, in summing order: each term's switch, weight
    and parameters are declared below as the term declares them (:func:`term_field_problems`)."""

    enabled: bool = True
    """Off: the reward is the raw active-micro-task score s (no normalisation, no clipping)."""
    score_window: int = Field(1, ge=1)
    """Steps of the episode the score is averaged over before anything else (the current step and
    the ones before it in the same micro-task; a switch starts a new average). 1: no averaging.
    An option that asks whether the reward can absorb a scorer's step-to-step noise."""
    initial_low: float = 0.45
    """Initial lower bound of every micro-task's score range."""
    initial_high: float = 0.70
    """Initial upper bound of every micro-task's score range."""
    bounds: Literal["tracking", "widen_only", "fixed"] = "tracking"
    """'tracking': one pair per micro-task shared by all envs, following the envelope of the
    micro-task's recent scores both ways; 'widen_only': one pair per env and micro-task, moved
    toward the current score only when it lies outside (the per-micro-task reconstruction (v1));
    'fixed': the initial bounds throughout."""
    bound_rate: float = Field(0.01, ge=0, le=1)
    """Fraction of the gap a bound moves per step when that widens the range (Table 1)."""
    contraction_rate: float = Field(0.003, ge=0, le=1)
    """Fraction of the gap a 'tracking' bound moves per step when that narrows the range."""
    bound_window: int = Field(3, ge=1)
    """Steps over which a 'tracking' bound takes the min / max of the micro-task's scores."""
    reset_bounds_on_episode: bool = False
    """'widen_only' only: restart an env's bounds at each of its episodes."""
    level: bool = True
    """Include the level term."""
    band: bool = True
    """Level L = (k + u)/K - 1 with the terms' history on L over the episode (default); off:
    L = u - 1 per micro-task, with history per micro-task (the per-micro-task reconstruction (v1))."""

    # The terms' fields (rmtl.reward.shaping_terms.Trend, Momentum).
    trend: bool = False
    """Include the trend term (Table 1; off by default: the pre-registered oracle sweep, docs/reward.md)."""
    trend_weight: float = Field(0.3, ge=0)
    trend_window: int = Field(3, ge=1)
    """Previous steps the trend compares with."""
    momentum: bool = False
    """Include the momentum term (EMA of level differences; Table 1; off by default, as trend)."""
    momentum_weight: float = Field(0.3, ge=0)
    momentum_decay: float = Field(0.7, ge=0, lt=1)
    """EMA coefficient: m <- decay * m + (1 - decay) * (L_t - L_prev)."""

    # The penalty on a negative delta (after the terms, so it acts on their sum).
    drop_penalty: bool = False
    """Multiply a negative delta (the sum of the terms) by drop_multiplier (Table 1; off by default, as trend)."""
    drop_multiplier: float = Field(2.0, ge=1)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        _check_term_fields(cls)

    @model_validator(mode="before")
    @classmethod
    def _shaping_v1_fields(cls, data: Any) -> Any:
        """Configs written before the band was the default name ``adaptive_bounds`` and
        ``phase_offset``: they mean the per-micro-task reconstruction (v1) (bounds per env that only widen,
        or fixed; level u - 1, or the band), so saved runs load, evaluate and resume."""
        if isinstance(data, dict) and ({"adaptive_bounds", "phase_offset"} & set(data)):
            data = dict(data)
            adaptive, offset = data.pop("adaptive_bounds", True), data.pop("phase_offset", False)
            data.setdefault("bounds", "widen_only" if adaptive else "fixed")
            data.setdefault("band", bool(offset))
        return data

    @model_validator(mode="after")
    def _bounds(self) -> ShapingConfig:
        if self.initial_low >= self.initial_high:
            raise ValueError("initial_low must be below initial_high")
        if self.reset_bounds_on_episode and self.bounds != "widen_only":
            raise ValueError("reset_bounds_on_episode needs bounds 'widen_only' (tracking bounds are shared by all envs)")
        return self


def term_field_problems(cls: type[ShapingConfig]) -> list[str]:
    """How the fields ``cls`` declares differ from what its terms declare (each term's switch, weight
    and parameters: :meth:`~rmtl.reward.shaping_terms.ShapingTerm.config_fields`): a field missing, or
    declared with another type, default, constraint or description. Empty when they agree."""
    problems = []
    for term in cls.terms:
        for name, (annotation, want) in term.config_fields().items():
            have = cls.model_fields.get(name)
            if have is None:
                problems.append(f"{cls.__name__} lacks {name!r} of the shaping term {term.__name__}")
                continue
            for what, a, b in (("type", have.annotation, annotation), ("default", have.default, want.default),
                               ("constraints", have.metadata, want.metadata),
                               ("description", have.description, want.description)):
                if a != b:
                    problems.append(f"{cls.__name__}.{name}: {what} {a!r}, the term {term.__name__} declares {b!r}")
    return problems


def _check_term_fields(cls: type[ShapingConfig]) -> None:
    problems = term_field_problems(cls)
    if problems:
        raise TypeError("the shaping config's fields and its terms' differ: " + "; ".join(problems))


_check_term_fields(ShapingConfig)


@dataclass(frozen=True)
class ShapingOutput:
    """Shaped reward and its terms, each [N]; a term's values are also its attribute (``out.trend``)."""

    reward: np.ndarray
    u: np.ndarray
    level: np.ndarray
    delta: np.ndarray
    low: np.ndarray
    high: np.ndarray
    terms: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Each shaping term's value by name, in summing order."""

    def __getattr__(self, name: str) -> np.ndarray:
        terms = self.__dict__.get("terms", {})
        if name in terms:
            return terms[name]
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")

    def named(self) -> dict[str, np.ndarray]:
        """u, level, every term, delta and the bounds by name (what a kind reports in ``info['reward']``)."""
        return {"u": self.u, "level": self.level, **self.terms, "delta": self.delta, "low": self.low, "high": self.high}


class RewardShaper:
    """Stateful shaping for N environments (one row each); call :meth:`reset` at episode ends.

    ``low`` and ``high`` are [N, K]; with 'tracking' bounds every row holds the same shared pair.
    ``num_phases`` is K, the task's number of micro-tasks (1 for a single-prompt reward).
    """

    MIN_RANGE = 1e-6

    def __init__(self, num_envs: int, config: ShapingConfig | None = None, *, num_phases: int):
        if num_envs < 1 or num_phases < 1:
            raise ConfigError(f"RewardShaper needs at least one env and one phase, got {num_envs}, {num_phases}")
        self.config = cfg = config or ShapingConfig()
        self.num_envs, self.num_phases = int(num_envs), int(num_phases)
        n, k = self.num_envs, self.num_phases
        self.low = np.full((n, k), cfg.initial_low, dtype=np.float64)
        self.high = np.full((n, k), cfg.initial_high, dtype=np.float64)
        # Per micro-task min / max of the last bound_window steps (NaN: not active at that step).
        self._win_min = np.full((cfg.bound_window, k), np.nan)
        self._win_max = np.full((cfg.bound_window, k), np.nan)
        self._win_pos = 0
        # History slots: one per env (band: L over the episode) or one per micro-task (per-phase u).
        slots = 1 if cfg.band else k
        self._count = np.zeros((n, slots), dtype=np.int64)
        self.terms = tuple(term(cfg, n, slots) for term in type(cfg).terms)
        # Score averaging: the last score_window scores of each env's current micro-task.
        self._scores = np.zeros((n, cfg.score_window), dtype=np.float64)
        self._score_count = np.zeros(n, dtype=np.int64)
        self._score_phase = np.full(n, -1, dtype=np.int64)

    def reset(self, envs: np.ndarray | None = None) -> None:
        """Start a new episode for the envs selected by a boolean mask or index array (None: all)."""
        idx = slice(None) if envs is None else np.asarray(envs)
        if isinstance(idx, np.ndarray) and idx.dtype == bool and not idx.any():
            return
        self._count[idx] = 0
        for term in self.terms:
            term.reset(idx)
        self._score_count[idx] = 0
        self._score_phase[idx] = -1
        if self.config.reset_bounds_on_episode:
            self.low[idx] = self.config.initial_low
            self.high[idx] = self.config.initial_high

    def state_dict(self) -> dict[str, Any]:
        """The running statistics a resumed learner needs (bounds and their window; JSON-able).
        Episode history is not kept: a resumed run starts new episodes."""
        return {"low": self.low.tolist(), "high": self.high.tolist(),
                "win_min": json_safe(self._win_min.tolist()), "win_max": json_safe(self._win_max.tolist()),
                "win_pos": self._win_pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        low, high = np.asarray(state["low"], dtype=np.float64), np.asarray(state["high"], dtype=np.float64)
        if low.shape != self.low.shape:
            raise ConfigError(f"saved shaping bounds have shape {low.shape}, this shaper {self.low.shape}")
        self.low, self.high = low, high
        self._win_min = np.asarray(state["win_min"], dtype=np.float64)
        self._win_max = np.asarray(state["win_max"], dtype=np.float64)
        self._win_pos = int(state["win_pos"])

    def _phase_ids(self, n: int, phases: np.ndarray | None) -> np.ndarray:
        if self.num_phases == 1:
            return np.zeros(n, dtype=np.int64)
        if phases is None:
            raise ConfigError(f"a {self.num_phases}-phase shaper needs the phase id of every env")
        k = np.asarray(phases, dtype=np.int64).reshape(-1)
        if np.any((k < 0) | (k >= self.num_phases)):
            raise ConfigError(f"phase ids must be in [0, {self.num_phases - 1}], got {k.tolist()}")
        return k

    def _move_bounds(self, s: np.ndarray, k: np.ndarray) -> None:
        cfg, rows = self.config, np.arange(self.num_envs)
        if cfg.bounds == "widen_only":
            lo, hi = self.low[rows, k], self.high[rows, k]
            self.low[rows, k] = np.where(s < lo, lo + cfg.bound_rate * (s - lo), lo)
            self.high[rows, k] = np.where(s > hi, hi + cfg.bound_rate * (s - hi), hi)
        elif cfg.bounds == "tracking":
            w = self._win_pos % cfg.bound_window
            self._win_min[w] = np.nan
            self._win_max[w] = np.nan
            for p in np.unique(k):
                sp = s[k == p]
                self._win_min[w, p], self._win_max[w, p] = sp.min(), sp.max()
                m, big_m = np.nanmin(self._win_min[:, p]), np.nanmax(self._win_max[:, p])
                lo, hi = self.low[0, p], self.high[0, p]
                lo += (cfg.bound_rate if m < lo else cfg.contraction_rate) * (m - lo)
                hi += (cfg.bound_rate if big_m > hi else cfg.contraction_rate) * (big_m - hi)
                if hi - lo < self.MIN_RANGE:  # a constant score: keep a range to divide by
                    mid = 0.5 * (lo + hi)
                    lo, hi = mid - self.MIN_RANGE / 2, mid + self.MIN_RANGE / 2
                self.low[:, p], self.high[:, p] = lo, hi
            self._win_pos += 1

    def __call__(self, scores: np.ndarray, phases: np.ndarray | None = None) -> ShapingOutput:
        """Shape active-micro-task scores [N] given phase ids [N]; advances the episode state.

        With one phase the phase ids are ignored (and may be None): whatever selector the
        caller runs, the reward of a one-phase shaper cannot depend on its phases.
        """
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        k = self._phase_ids(s.shape[0], phases)
        if s.shape[0] != self.num_envs or k.shape[0] != self.num_envs:
            raise ConfigError(f"expected {self.num_envs} scores and phases, got {s.shape[0]} and {k.shape[0]}")
        rows = np.arange(self.num_envs)
        if self.config.score_window > 1:
            s = self._averaged(s, k)
        if not self.config.enabled:
            zeros = np.zeros(self.num_envs, dtype=np.float32)
            return ShapingOutput(s.astype(np.float32), zeros, zeros, zeros, self.low[rows, k].astype(np.float32),
                                 self.high[rows, k].astype(np.float32), {term.name: zeros for term in self.terms})
        self._move_bounds(s, k)
        lo, hi = self.low[rows, k], self.high[rows, k]
        u = np.clip((s - lo) / np.maximum(hi - lo, self.MIN_RANGE), 0.0, 1.0)
        return self._shape(u, k, lo, hi)

    def _averaged(self, s: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Each env's score averaged with its previous ones in the same micro-task this episode."""
        w = self.config.score_window
        switched = k != self._score_phase
        self._score_count[switched] = 0
        self._score_phase = k.copy()
        rows = np.arange(self.num_envs)
        self._scores[rows, self._score_count % w] = s
        self._score_count += 1
        filled = np.minimum(self._score_count, w)
        mask = np.arange(w)[None, :] < filled[:, None]
        return (self._scores * mask).sum(axis=1) / filled

    def shape_u(self, u: np.ndarray, phases: np.ndarray | None = None) -> ShapingOutput:
        """Shape a given normalised score u [N] (no bounds): what a reward without a scorer uses."""
        u = np.clip(np.asarray(u, dtype=np.float64).reshape(-1), 0.0, 1.0)
        k = self._phase_ids(u.shape[0], phases)
        if u.shape[0] != self.num_envs or k.shape[0] != self.num_envs:
            raise ConfigError(f"expected {self.num_envs} values and phases, got {u.shape[0]} and {k.shape[0]}")
        nan = np.full(self.num_envs, np.nan)
        return self._shape(u, k, nan, nan)

    def _shape(self, u: np.ndarray, k: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> ShapingOutput:
        cfg, rows = self.config, np.arange(self.num_envs)
        level_value = (k + u) / self.num_phases - 1.0 if cfg.band else u - 1.0
        slot = np.zeros_like(k) if cfg.band else k
        count = self._count[rows, slot]
        values = {term.name: term.value(level_value, rows, slot, count) for term in self.terms}

        delta = np.zeros_like(u)
        for term in self.terms:
            weight = term.weight()
            if weight is not None:
                delta += weight * values[term.name]
        if cfg.drop_penalty:
            delta = np.where(delta < 0, cfg.drop_multiplier * delta, delta)
        level = level_value if cfg.level else np.zeros_like(u)
        reward = np.clip(level + delta, REWARD_LOW, REWARD_HIGH)

        for term in self.terms:
            term.update(level_value, values[term.name], rows, slot, count)
        self._count[rows, slot] = count + 1
        f = np.float32
        return ShapingOutput(reward.astype(f), u.astype(f), level.astype(f), delta.astype(f), lo.astype(f), hi.astype(f),
                             {name: v.astype(f) for name, v in values.items()})

"""Reward shaping of the active micro-task score (paper Table 1; the formula is reconstructed).

Per environment and step, with s the aggregate score of the active phase k (see
docs/reward.md for the exact definition and the reasons behind each choice). The
default is the paper's Table 1 shaping:

1. bounds of phase k move toward s when s is outside them: lo += rate (s - lo) if s < lo,
   hi += rate (s - hi) if s > hi (start 0.45 / 0.70, rate 0.01);
2. u = clip((s - lo) / (hi - lo), 0, 1);
3. trend = u - mean(previous <= window u of phase k this episode) (0 without history);
4. momentum m_k <- decay m_k + (1 - decay) (u - previous u of phase k) (0 without history);
5. delta = w_t trend + w_m momentum, times drop_multiplier when negative;
6. level = u - 1;
7. reward = clip(level + delta, -1, 0).

The phase offset, level = (k + u) / K - 1, is a labelled variant (``phase_offset``),
never the default: it writes the selector's phase index k, which the Stage-1 rule reads
from the privileged gripper-cube distance, into the reward.

With one phase (K = 1, the single-prompt baselines) there is one pair of bounds and one
history, and the phase ids given with the scores are ignored: no phase index can reach
the reward.

Episode history (trend window, momentum, previous u) is reset with the episode; the
bounds are running statistics over training and persist unless reset_bounds_on_episode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field, model_validator

from rmtl.config import Config
from rmtl.errors import ConfigError
from rmtl.phases import PHASES

REWARD_LOW, REWARD_HIGH = -1.0, 0.0


class ShapingConfig(Config):
    """Switches and parameters of the shaping (paper Table 1 defaults)."""

    enabled: bool = True
    """Off: the reward is the raw active-phase score s (no normalisation, no clipping)."""
    initial_low: float = 0.45
    """Initial lower bound of every micro-task's running score range."""
    initial_high: float = 0.70
    """Initial upper bound of every micro-task's running score range."""
    adaptive_bounds: bool = True
    """Move the bounds toward scores outside them; off keeps the initial bounds fixed."""
    bound_rate: float = Field(0.01, ge=0, le=1)
    """Fraction of the gap to an outside score a bound moves per step."""
    reset_bounds_on_episode: bool = False
    """Restart the bounds at every episode (default: keep them as running statistics)."""
    level: bool = True
    """Include the level term (u - 1, or the phase-offset form)."""
    phase_offset: bool = False
    """Variant, not the paper's shaping: level = (k + u)/K - 1, so a switch to a later phase
    never looks like a loss, at the price of putting the phase index into the reward."""
    trend: bool = True
    """Include the trend term."""
    trend_weight: float = Field(0.3, ge=0)
    trend_window: int = Field(3, ge=1)
    """Previous steps of the same phase the trend compares with."""
    momentum: bool = True
    """Include the momentum term (EMA of u differences)."""
    momentum_weight: float = Field(0.3, ge=0)
    momentum_decay: float = Field(0.7, ge=0, lt=1)
    """EMA coefficient: m <- decay * m + (1 - decay) * (u_t - u_prev)."""
    drop_penalty: bool = True
    """Multiply a negative delta (trend + momentum) by drop_multiplier."""
    drop_multiplier: float = Field(2.0, ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> "ShapingConfig":
        if self.initial_low >= self.initial_high:
            raise ValueError("initial_low must be below initial_high")
        return self


@dataclass(frozen=True)
class ShapingOutput:
    """Shaped reward and its terms, each [N]."""

    reward: np.ndarray
    u: np.ndarray
    level: np.ndarray
    trend: np.ndarray
    momentum: np.ndarray
    delta: np.ndarray
    low: np.ndarray
    high: np.ndarray


class RewardShaper:
    """Stateful shaping for N environments (one row each); call :meth:`reset` at episode ends."""

    MIN_RANGE = 1e-6

    def __init__(self, num_envs: int, config: ShapingConfig | None = None, num_phases: int = len(PHASES)):
        if num_envs < 1 or num_phases < 1:
            raise ConfigError(f"RewardShaper needs at least one env and one phase, got {num_envs}, {num_phases}")
        self.config = config or ShapingConfig()
        self.num_envs, self.num_phases = int(num_envs), int(num_phases)
        n, k, w = self.num_envs, self.num_phases, self.config.trend_window
        self.low = np.full((n, k), self.config.initial_low, dtype=np.float64)
        self.high = np.full((n, k), self.config.initial_high, dtype=np.float64)
        self._hist = np.zeros((n, k, w), dtype=np.float64)  # ring buffer of previous u per phase
        self._count = np.zeros((n, k), dtype=np.int64)  # steps seen of each phase this episode
        self._prev = np.zeros((n, k), dtype=np.float64)
        self._mom = np.zeros((n, k), dtype=np.float64)

    def reset(self, envs: np.ndarray | None = None) -> None:
        """Start a new episode for the envs selected by a boolean mask or index array (None: all)."""
        idx = slice(None) if envs is None else np.asarray(envs)
        if isinstance(idx, np.ndarray) and idx.dtype == bool and not idx.any():
            return
        self._hist[idx] = 0.0
        self._count[idx] = 0
        self._prev[idx] = 0.0
        self._mom[idx] = 0.0
        if self.config.reset_bounds_on_episode:
            self.low[idx] = self.config.initial_low
            self.high[idx] = self.config.initial_high

    def __call__(self, scores: np.ndarray, phases: np.ndarray | None = None) -> ShapingOutput:
        """Shape active-phase scores [N] given phase ids [N]; advances the episode state.

        With one phase the phase ids are ignored (and may be None): whatever selector the
        caller runs, the reward of a one-phase shaper cannot depend on its phases.
        """
        cfg = self.config
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        if self.num_phases == 1:
            k = np.zeros(s.shape[0], dtype=np.int64)
        elif phases is None:
            raise ConfigError(f"a {self.num_phases}-phase shaper needs the phase id of every env")
        else:
            k = np.asarray(phases, dtype=np.int64).reshape(-1)
        if s.shape[0] != self.num_envs or k.shape[0] != self.num_envs:
            raise ConfigError(f"expected {self.num_envs} scores and phases, got {s.shape[0]} and {k.shape[0]}")
        if np.any((k < 0) | (k >= self.num_phases)):
            raise ConfigError(f"phase ids must be in [0, {self.num_phases - 1}], got {k.tolist()}")
        rows = np.arange(self.num_envs)
        zeros = np.zeros_like(s)
        if not cfg.enabled:
            lo, hi = self.low[rows, k].copy(), self.high[rows, k].copy()
            return ShapingOutput(s.astype(np.float32), *(zeros.astype(np.float32) for _ in range(5)), lo.astype(np.float32), hi.astype(np.float32))

        if cfg.adaptive_bounds:
            lo, hi = self.low[rows, k], self.high[rows, k]
            lo = np.where(s < lo, lo + cfg.bound_rate * (s - lo), lo)
            hi = np.where(s > hi, hi + cfg.bound_rate * (s - hi), hi)
            self.low[rows, k], self.high[rows, k] = lo, hi
        lo, hi = self.low[rows, k], self.high[rows, k]
        u = np.clip((s - lo) / np.maximum(hi - lo, self.MIN_RANGE), 0.0, 1.0)

        count = self._count[rows, k]
        seen = count > 0
        filled = np.minimum(count, cfg.trend_window)
        hist_sum = self._hist[rows, k].sum(axis=-1)  # unused slots are zero
        trend = np.where(seen, u - hist_sum / np.maximum(filled, 1), 0.0)
        diff = np.where(seen, u - self._prev[rows, k], 0.0)
        mom = np.where(seen, cfg.momentum_decay * self._mom[rows, k] + (1.0 - cfg.momentum_decay) * diff, 0.0)

        delta = zeros.copy()
        if cfg.trend:
            delta += cfg.trend_weight * trend
        if cfg.momentum:
            delta += cfg.momentum_weight * mom
        if cfg.drop_penalty:
            delta = np.where(delta < 0, cfg.drop_multiplier * delta, delta)
        if not cfg.level:
            level = zeros
        elif cfg.phase_offset:
            level = (k + u) / self.num_phases - 1.0
        else:
            level = u - 1.0
        reward = np.clip(level + delta, REWARD_LOW, REWARD_HIGH)

        # Advance the episode state of the active phase only.
        self._hist[rows, k, count % cfg.trend_window] = u
        self._count[rows, k] = count + 1
        self._prev[rows, k] = u
        self._mom[rows, k] = mom
        f = np.float32
        return ShapingOutput(reward.astype(f), u.astype(f), level.astype(f), trend.astype(f), mom.astype(f), delta.astype(f), lo.astype(f), hi.astype(f))

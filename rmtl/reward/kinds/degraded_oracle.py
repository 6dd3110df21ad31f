"""The oracle scorer with a controlled error (a diagnostic, never a VLM result): what must a
scorer get right for the reward to teach? (docs/reward_quality.md)

Per micro-task k, the score is the oracle's progress p_k (the ``oracle`` kind's, on the same
scale) changed in this order:

0. early progress: p -> 0 below ``dead_zone`` (the first steps of progress pay nothing), then
   p -> p ** ``power`` (``power`` > 1 compresses early progress: half-way pays 0.5 ** power);
1. confusions: in a task-defined region (``Task.scorer_confusions``, e.g. a cube resting at the
   gripper for grasp) p moves toward the goal's progress 1 by ``strength``: 1 pays the confused
   state as much as the goal, 0.5 half-way (half as much for a state of no progress);
2. inversion: p -> 1 - p where a fixed smooth random field of the visible state lies in its
   lowest ``inverted_share`` (1: everywhere);
3. systematic error: + ``systematic`` x a fixed smooth random function of the visible state
   (``Task.visible_state``) with unit variance and length scale ``length_scale`` (random Fourier
   features of a squared-exponential kernel): the same state always gets the same wrong score,
   so a policy can exploit it;
4. noise: + i.i.d. Gaussian noise of std ``noise`` per step.

Nothing is clipped: the shaping's bounds see the scores a scorer with these errors would give.
With ``single_score`` the K degraded progresses are averaged into one whole-task score and the
reward has one phase (no phase index), as a single-prompt VLM reward has.
The error's randomness comes from ``error.seed`` (default: derived from the run's seed, so
every training seed meets another error landscape). With every error zero it is the oracle.
"""

from __future__ import annotations

from typing import Any, Literal
from collections.abc import Callable, Mapping

import numpy as np
from pydantic import Field, model_validator

from rmtl.config import Config
from rmtl.errors import ConfigError
from rmtl.micro_tasks import micro_task_indices
from rmtl.reward.kinds import register_kind
from rmtl.reward.kinds.base import RunFacts
from rmtl.reward.kinds.oracle import OracleKind, OracleRewardConfig, Progress

ERROR_SEED_SALT = 0x1EA2
"""Mixed with a run's seed into the default error seed (so it differs from the run's own streams)."""
NUM_FEATURES = 256
"""Random Fourier features per smooth field."""


class ScoreError(Config):
    """The error of one micro-task's score, in progress units (the oracle's 0-1 scale)."""

    systematic: float = Field(0.0, ge=0)
    """Std of the fixed smooth error (0: none)."""
    length_scale: float = Field(0.05, gt=0)
    """Length scale (m) of the smooth error and of the inversion field."""
    noise: float = Field(0.0, ge=0)
    """Std of the i.i.d. per-step noise (0: none)."""
    inverted_share: float = Field(0.0, ge=0, le=1)
    """Share of the visible-state space where progress is reversed (1: everywhere)."""
    dead_zone: float = Field(0.0, ge=0, le=1)
    """Progress below this is paid as none (0: none). Pick-and-lift's grasp progress is lift / 2 cm,
    so 0.5 pays nothing below 1 cm of lift."""
    power: float = Field(1.0, ge=1)
    """Progress is raised to this power (1: unchanged; 3 pays a quarter of the way 0.016)."""


class ScorerErrorConfig(Config):
    """The error model of a degraded oracle."""

    seed: int | None = Field(None, ge=0)
    """Seed of the error landscapes and noise, 0 or more (None: derived from the run's seed)."""
    default: ScoreError = ScoreError()
    """The error of every micro-task not named in ``micro_tasks``."""
    micro_tasks: dict[str, ScoreError] = {}
    """Per micro-task name: its own error (replaces ``default`` for it)."""
    confusions: dict[str, float] = {}
    """Confusion name (the task's ``scorer_confusions``) -> strength in [0, 1]."""

    @model_validator(mode="after")
    def _strengths(self) -> ScorerErrorConfig:
        for name, strength in self.confusions.items():
            if not 0.0 <= strength <= 1.0:
                raise ValueError(f"confusion {name!r} has strength {strength}; strengths lie in [0, 1]")
        return self


class DegradedOracleRewardConfig(OracleRewardConfig):
    """The oracle-scored diagnostic with a controlled scorer error."""

    kind: Literal["degraded_oracle"] = "degraded_oracle"  # type: ignore[assignment]
    error: ScorerErrorConfig = ScorerErrorConfig()
    """What is wrong with the scorer."""
    single_score: bool = False
    """One whole-task score, the mean of the K degraded progresses, and one phase: the oracle
    counterpart of a single-prompt reward (no phase index in the reward)."""


class SmoothField:
    """A fixed random function R^F -> R^K with unit variance per output and a squared-exponential
    kernel of length scale ``length_scale`` (random Fourier features)."""

    def __init__(self, rng: np.random.Generator, dim: int, outputs: int, length_scales: np.ndarray):
        self.omega = rng.standard_normal((outputs, NUM_FEATURES, dim)) / np.asarray(length_scales).reshape(-1, 1, 1)
        self.phase = rng.uniform(0.0, 2 * np.pi, (outputs, NUM_FEATURES))
        self.weight = rng.standard_normal((outputs, NUM_FEATURES)) * np.sqrt(2.0 / NUM_FEATURES)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """[N, F] -> [N, K]."""
        z = np.einsum("nf,kdf->nkd", np.asarray(x, dtype=np.float64), self.omega) + self.phase
        return np.einsum("nkd,kd->nk", np.cos(z), self.weight)


@register_kind("degraded_oracle", config=DegradedOracleRewardConfig)
class DegradedOracleKind(OracleKind):
    """The ``oracle`` kind whose scores carry the errors of a :class:`ScorerErrorConfig`."""

    def __init__(self, progress: Progress, micro_tasks: tuple[str, ...], error: ScorerErrorConfig, seed: int,
                 visible: Callable[[np.ndarray], np.ndarray] | None, confusions: Mapping[str, Any],
                 initial_low: float = 0.45, initial_high: float = 0.70, add_env_reward: bool = True,
                 single_score: bool = False):
        super().__init__(progress, 1 if single_score else len(micro_tasks), initial_low, initial_high, add_env_reward)
        self.single_score = bool(single_score)
        micro_task_indices(micro_tasks, sorted(error.micro_tasks), "reward.error.micro_tasks")
        missing = set(error.confusions) - set(confusions)
        if missing:
            known = ", ".join(sorted(confusions)) or "none"
            raise ConfigError(f"reward.error.confusions names {sorted(missing)}; this task's confusions: {known}")
        self.micro_tasks, self.error, self.seed = tuple(micro_tasks), error, int(seed)
        self.errors = [error.micro_tasks.get(name, error.default) for name in self.micro_tasks]
        self.confusions = [(k, confusions[n].region, float(s)) for n, s in error.confusions.items() if s > 0
                           for k in (range(len(micro_tasks)) if confusions[n].micro_task is None
                                     else [micro_tasks.index(confusions[n].micro_task)])]
        self._systematic = np.array([e.systematic for e in self.errors])
        self._noise = np.array([e.noise for e in self.errors])
        self._share = np.array([e.inverted_share for e in self.errors])
        self._dead_zone = np.array([e.dead_zone for e in self.errors])
        self._power = np.array([e.power for e in self.errors])
        if self._needs_fields() and visible is None:
            raise ConfigError("this task defines no visible state (Task.visible_state); its degraded oracle can "
                              "take noise, confusions and full inversion but no smooth error")
        self.visible = visible
        seq = np.random.SeedSequence([self.seed, ERROR_SEED_SALT])
        field_seq, inversion_seq, noise_seq = seq.spawn(3)
        # The fields are drawn on first use, when the visible state's width is known.
        self._fields: tuple[SmoothField, SmoothField] | None = None
        self._field_seqs = (field_seq, inversion_seq)
        self._noise_rng = np.random.default_rng(noise_seq)

    def _needs_fields(self) -> bool:
        return bool(self._systematic.any() or ((self._share > 0) & (self._share < 1)).any())

    def _smooth_fields(self, x: np.ndarray) -> tuple[SmoothField, SmoothField]:
        if self._fields is None:
            scales = np.array([e.length_scale for e in self.errors])
            dim, k = x.shape[1], len(self.errors)
            self._fields = (SmoothField(np.random.default_rng(self._field_seqs[0]), dim, k, scales),
                            SmoothField(np.random.default_rng(self._field_seqs[1]), dim, k, scales))
        return self._fields

    @classmethod
    def build(cls, reward: DegradedOracleRewardConfig, task, facts: RunFacts, *, vlm=None, source=None) -> DegradedOracleKind:
        import functools

        if task.oracle_progress is None:
            raise ConfigError(f"task {task.name!r} defines no oracle progress; reward kind 'degraded_oracle' needs "
                              "one (Task.oracle_progress)")
        seed = reward.error.seed if reward.error.seed is not None else int(facts.seed)
        return cls(functools.partial(task.oracle_progress, config=reward.progress), tuple(task.micro_tasks.names),
                   reward.error, seed, task.visible_state, task.scorer_confusions, reward.shaping.initial_low,
                   reward.shaping.initial_high, reward.add_env_reward, reward.single_score)

    def degraded_progress(self, states: np.ndarray, noise: bool = True) -> np.ndarray:
        """The degraded progress [N, K], or [N, 1] with ``single_score`` (no clipping);
        ``noise=False`` leaves out the i.i.d. noise (the part of the error a fixed state always gets)."""
        s = np.atleast_2d(np.asarray(states, dtype=np.float64))
        p = np.asarray(self.progress(s), dtype=np.float64).copy()
        if self._dead_zone.any():
            p = np.where(p < self._dead_zone, 0.0, p)
        if (self._power != 1.0).any():
            p = np.clip(p, 0.0, None) ** self._power
        for k, region, strength in self.confusions:
            m = np.asarray(region(s), dtype=bool)
            p[m, k] += strength * (1.0 - p[m, k])
        systematic, inversion = None, None
        if self._needs_fields():
            x = np.asarray(self.visible(s), dtype=np.float64)
            field, inv_field = self._smooth_fields(x)
            systematic = field(x) if self._systematic.any() else None
            inversion = inv_field(x)
        if self._share.any():
            from scipy.special import ndtr  # the field is unit-variance Gaussian: its CDF is its quantile

            quantile = ndtr(inversion) if inversion is not None else np.zeros_like(p)
            flip = quantile < self._share
            p = np.where(flip, 1.0 - p, p)
        if systematic is not None:
            p = p + self._systematic * systematic
        if noise and self._noise.any():
            p = p + self._noise * self._noise_rng.standard_normal(p.shape)
        return p.mean(axis=1, keepdims=True) if self.single_score else p

    def scores(self, states: np.ndarray) -> np.ndarray:
        return self.low + (self.high - self.low) * self.degraded_progress(states)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "error_seed": self.seed, "error": self.error.model_dump(mode="json"),
                "single_score": self.single_score}

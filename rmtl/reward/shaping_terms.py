"""The shaping terms: each additive term of the shaped reward's delta is one class here; the
shaper's outputs and the reported ``info['reward']`` terms are derived from :data:`SHAPING_TERMS`,
and the shaping config declares each term's fields, checked against :meth:`ShapingTerm.config_fields`
(adding a term: docs/reward.md, "Adding a shaping term").

A term named ``x`` has the config fields ``x`` (switch) and ``x_weight`` plus its own
``parameters``; per step it sees the level L of every env and the length of that env's history
this episode, returns its value (reported whether switched on or not) and, when on, adds
``x_weight * value`` to delta. Its episode state is its own, one slot per env (band) or per env
and micro-task (per-micro-task history).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
from pydantic import Field


class ShapingTerm(ABC):
    """One additive term of delta, with its config fields and episode state."""

    name: ClassVar[str]
    """Its config switch, its output attribute and its ``info['reward']`` key."""
    about: ClassVar[str]
    """The switch's documentation (the config field's description)."""
    default_weight: ClassVar[float]
    on_by_default: ClassVar[bool] = False
    parameters: ClassVar[dict[str, tuple[Any, Any]]] = {}
    """Its further config fields as ``name: (type, pydantic Field)``."""

    def __init__(self, config: Any, num_envs: int, slots: int):
        self.config = config

    @classmethod
    def config_fields(cls) -> dict[str, tuple[Any, Any]]:
        """Its config fields: switch, weight, parameters (in that order)."""
        return {cls.name: (bool, Field(cls.on_by_default, description=cls.about)),
                f"{cls.name}_weight": (float, Field(cls.default_weight, ge=0)), **cls.parameters}

    def weight(self) -> float | None:
        """Its weight when switched on, None when off."""
        return float(getattr(self.config, f"{self.name}_weight")) if getattr(self.config, self.name) else None

    @abstractmethod
    def value(self, level: np.ndarray, rows: np.ndarray, slot: np.ndarray, count: np.ndarray) -> np.ndarray:
        """Its value [N] at level L [N], given the envs' history slots and their lengths this episode."""

    @abstractmethod
    def update(self, level: np.ndarray, value: np.ndarray, rows: np.ndarray, slot: np.ndarray,
               count: np.ndarray) -> None:
        """Record this step (after :meth:`value`)."""

    @abstractmethod
    def reset(self, idx: Any) -> None:
        """Forget the episode history of the envs ``idx`` (a mask, an index array or a slice)."""


class Trend(ShapingTerm):
    """L minus the mean of the previous <= ``trend_window`` L of the slot this episode (0 without history)."""

    name = "trend"
    about = "Include the trend term (Table 1; off by default: the pre-registered oracle sweep, docs/reward.md)."
    default_weight = 0.3
    parameters = {"trend_window": (int, Field(3, ge=1, description="Previous steps the trend compares with."))}

    def __init__(self, config: Any, num_envs: int, slots: int):
        super().__init__(config, num_envs, slots)
        self.window = int(config.trend_window)
        self._hist = np.zeros((num_envs, slots, self.window), dtype=np.float64)

    def value(self, level, rows, slot, count):
        filled = np.minimum(count, self.window)
        hist_sum = self._hist[rows, slot].sum(axis=-1)  # unused slots are zero
        return np.where(count > 0, level - hist_sum / np.maximum(filled, 1), 0.0)

    def update(self, level, value, rows, slot, count):
        self._hist[rows, slot, count % self.window] = level

    def reset(self, idx):
        self._hist[idx] = 0.0


class Momentum(ShapingTerm):
    """EMA of level differences: m <- decay m + (1 - decay) (L - previous L) (0 without history)."""

    name = "momentum"
    about = "Include the momentum term (EMA of level differences; Table 1; off by default, as trend)."
    default_weight = 0.3
    parameters = {"momentum_decay": (float, Field(0.7, ge=0, lt=1, description=(
        "EMA coefficient: m <- decay * m + (1 - decay) * (L_t - L_prev).")))}

    def __init__(self, config: Any, num_envs: int, slots: int):
        super().__init__(config, num_envs, slots)
        self.decay = float(config.momentum_decay)
        self._prev = np.zeros((num_envs, slots), dtype=np.float64)
        self._mom = np.zeros((num_envs, slots), dtype=np.float64)

    def value(self, level, rows, slot, count):
        seen = count > 0
        diff = np.where(seen, level - self._prev[rows, slot], 0.0)
        return np.where(seen, self.decay * self._mom[rows, slot] + (1.0 - self.decay) * diff, 0.0)

    def update(self, level, value, rows, slot, count):
        self._prev[rows, slot] = level
        self._mom[rows, slot] = value

    def reset(self, idx):
        self._prev[idx] = 0.0
        self._mom[idx] = 0.0


SHAPING_TERMS: tuple[type[ShapingTerm], ...] = (Trend, Momentum)
"""The terms of delta, in the order they are summed and reported."""

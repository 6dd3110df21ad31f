"""A shaping term is defined in one place: a term added to the registry appears in the config, the
shaper's output and the reported terms without other edits (rmtl.reward.shaping_terms)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import Field

from rmtl.reward.kinds.base import shaped_terms
from rmtl.reward.shaping import RewardShaper, ShapingConfig, shaping_config_class
from rmtl.reward.shaping_terms import SHAPING_TERMS, ShapingTerm


class Step(ShapingTerm):
    """L minus the previous L, scaled (a test's own term)."""

    name = "step"
    about = "Include the step term."
    default_weight = 0.5
    parameters = {"step_scale": (float, Field(2.0, gt=0))}

    def __init__(self, config, num_envs, slots):
        super().__init__(config, num_envs, slots)
        self._prev = np.zeros((num_envs, slots))

    def value(self, level, rows, slot, count):
        return np.where(count > 0, self.config.step_scale * (level - self._prev[rows, slot]), 0.0)

    def update(self, level, value, rows, slot, count):
        self._prev[rows, slot] = level

    def reset(self, idx):
        self._prev[idx] = 0.0


def test_the_default_config_has_the_registered_terms_fields():
    assert ShapingConfig.terms == SHAPING_TERMS
    for term in SHAPING_TERMS:
        assert {term.name, f"{term.name}_weight", *term.parameters} <= set(ShapingConfig.model_fields)


def test_a_new_term_reaches_config_output_and_reported_terms():
    config_class = shaping_config_class(SHAPING_TERMS + (Step,))
    assert {"step", "step_weight", "step_scale"} <= set(config_class.model_fields)
    on = RewardShaper(1, config_class(step=True, bounds="fixed"), num_phases=3)
    off = RewardShaper(1, config_class(bounds="fixed"), num_phases=3)
    plain = RewardShaper(1, ShapingConfig(bounds="fixed"), num_phases=3)
    for s, k in ((0.5, 0), (0.6, 0), (0.45, 1)):
        a, b, c = (sh(np.array([s]), np.array([k])) for sh in (on, off, plain))
        step = a.step[0]
        assert shaped_terms(a)["step"][0] == step and "step" not in shaped_terms(c)
        np.testing.assert_allclose(a.delta, 0.5 * a.step, atol=1e-6)
        np.testing.assert_allclose(b.reward, c.reward, atol=0)  # switched off: the shaping is unchanged
    # last step: align at u = 0 after approach at u = 0.6: 2 * ((1 + 0)/3 - 1 - ((0 + 0.6)/3 - 1))
    assert step == pytest.approx(2.0 * (1 / 3 - 0.6 / 3), abs=1e-6)
    assert list(shaped_terms(a)) == ["u", "level", "trend", "momentum", "step", "delta", "low", "high"]

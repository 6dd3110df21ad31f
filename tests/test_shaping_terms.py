"""A shaping term is defined in one place (rmtl.reward.shaping_terms) and its fields are declared in
the shaping config, checked against what the term declares: a term added to the registry appears in
the shaper's output and the reported terms without other edits."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from pydantic import Field

from rmtl.reward.kinds.base import shaped_terms
from rmtl.reward.shaping import RewardShaper, ShapingConfig, term_field_problems
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


class StepShapingConfig(ShapingConfig):
    """The shaping config with the test's term: its switch, weight and parameter declared."""

    terms: ClassVar[tuple[type[ShapingTerm], ...]] = SHAPING_TERMS + (Step,)
    step: bool = Field(False, description="Include the step term.")
    step_weight: float = Field(0.5, ge=0)
    step_scale: float = Field(2.0, gt=0)


def test_the_config_declares_every_registered_terms_fields_as_the_term_does():
    assert ShapingConfig.terms == SHAPING_TERMS
    assert term_field_problems(ShapingConfig) == []
    for term in SHAPING_TERMS:
        declared = {n: ShapingConfig.model_fields[n] for n in term.config_fields()}
        for name, (annotation, field) in term.config_fields().items():
            assert declared[name].annotation is annotation and declared[name].default == field.default, name
    # the fields declared in the class body, seen by a type checker: no field is made at run time
    assert {"trend", "trend_weight", "trend_window", "momentum", "momentum_weight", "momentum_decay"} <= set(
        ShapingConfig.__annotations__)


def test_a_config_that_declares_a_terms_fields_otherwise_is_refused():
    with pytest.raises(TypeError, match="lacks 'step_scale' of the shaping term Step"):
        class Missing(ShapingConfig):
            terms: ClassVar[tuple[type[ShapingTerm], ...]] = SHAPING_TERMS + (Step,)
            step: bool = Field(False, description="Include the step term.")
            step_weight: float = Field(0.5, ge=0)

    with pytest.raises(TypeError, match=r"Other\.step_weight: default 0\.3, the term Step declares 0\.5"):
        class Other(StepShapingConfig):
            step_weight: float = Field(0.3, ge=0)

    with pytest.raises(TypeError, match=r"Looser\.trend_window: constraints \[\]"):
        class Looser(ShapingConfig):
            trend_window: int = 3


def test_a_new_term_reaches_config_output_and_reported_terms():
    config_class = StepShapingConfig
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

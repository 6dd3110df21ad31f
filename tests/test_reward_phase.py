"""Phase selection behind the PhaseSelector interface (rmtl.reward.phase)."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.errors import ConfigError
from rmtl.tasks.fetch_lift.phases import ALIGN, APPROACH, GRASP
from rmtl.reward.phase import ExternalPhaseSelector, PhaseSelector, RulePhaseSelector
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.state import CUBE_REL_POS, STATE_DIM

RULE = RulePhaseSelector(get_task().phases)
"""Pick-and-lift's phase rule (the distance rule), as training builds it from the task."""


def _states(distances):
    s = np.zeros((len(distances), STATE_DIM), dtype=np.float32)
    s[:, CUBE_REL_POS.start] = distances
    return s


def test_rule_bins():
    sel = RULE
    assert isinstance(sel, PhaseSelector)
    got = sel(_states([0.01, 0.039, 0.05, 0.149, 0.16, 1.0]), [{}] * 6)
    assert got.dtype == np.int64
    assert got.tolist() == [GRASP, GRASP, ALIGN, ALIGN, APPROACH, APPROACH]
    with pytest.raises(ConfigError, match="states"):
        sel(np.zeros((2, 3)), [])


def test_external_selector_returns_what_was_set():
    sel = ExternalPhaseSelector(3, num_phases=3)
    assert isinstance(sel, PhaseSelector)
    assert sel(_states([1, 1, 1]), []).tolist() == [0, 0, 0]
    sel.set([2, 1, 0])
    assert sel(_states([1, 1, 1]), []).tolist() == [2, 1, 0]
    with pytest.raises(ConfigError):
        sel.set([3, 0, 0])

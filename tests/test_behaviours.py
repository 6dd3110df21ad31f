"""Scripted degenerate behaviours of pick-and-lift, measured from the state in the real env."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rmtl.env.expert import ScriptedExpert

FIXTURE = Path(__file__).parent / "fixtures" / "expert_actions.npz"


def test_expert_actions_unchanged_by_the_shared_controller():
    # Recorded before the expert's controller was shared with the behaviours: 400 synthetic
    # states on every scale its branches switch at, and 120 states of noisy expert episodes.
    rec = np.load(FIXTURE)
    s = rec["states"]
    assert np.array_equal(ScriptedExpert()(s), rec["batch"])
    assert np.array_equal(np.stack([ScriptedExpert()(x) for x in s]), rec["single"])
    assert np.array_equal(ScriptedExpert(noise_std=0.2, seed=7)(s), rec["noisy"])
    assert np.array_equal(ScriptedExpert(hover_height=0.1)(s), rec["hover_0_1"])

"""Reward shaping: Table 1 by hand, bounds, trend, momentum, drop penalty, range, the phase-offset
variant, one-phase invariance, reset (rmtl.reward.shaping)."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.errors import ConfigError
from rmtl.reward.shaping import RewardShaper, ShapingConfig

LEVEL_ONLY = dict(trend=False, momentum=False, adaptive_bounds=False)


def run(shaper, scores, phases=None):
    out = []
    for i, s in enumerate(scores):
        p = 0 if phases is None else phases[i]
        out.append(shaper(np.array([s]), np.array([p])))
    return out


# Table 1 by hand, one phase, default config. Per step: (s, lo, hi, u, trend, momentum, delta, reward).
# lo/hi start at 0.45/0.70 and move 1% of the gap toward a score outside them before u is
# computed; trend = u - mean(previous <= 3 u); momentum = 0.7 m + 0.3 (u - u_prev);
# delta = 0.3 trend + 0.3 momentum, doubled when negative; reward = clip(u - 1 + delta, -1, 0).
# E.g. step 1: lo = 0.45 + 0.01 (0.42 - 0.45) = 0.4497, u = 0; step 7: u = (0.60 - 0.4497) /
# (0.7002 - 0.4497) = 0.6, trend = 0.6 - mean(0.680384, 0.440671, 1) = -0.107018, momentum =
# 0.7 * 0.188314 + 0.3 (0.6 - 1) = 0.011820, delta = 2 * 0.3 (-0.107018 + 0.011820) = -0.057119.
TABLE1_STEPS = [
    (0.42, 0.449700, 0.700000, 0.000000, 0.000000, 0.000000, 0.000000, -1.000000),
    (0.50, 0.449700, 0.700000, 0.200959, 0.200959, 0.060288, 0.078374, -0.720667),
    (0.58, 0.449700, 0.700000, 0.520575, 0.420096, 0.138086, 0.167455, -0.311970),
    (0.62, 0.449700, 0.700000, 0.680384, 0.439872, 0.144603, 0.175343, -0.144274),
    (0.56, 0.449700, 0.700000, 0.440671, -0.026635, 0.029308, 0.000802, -0.558527),
    (0.72, 0.449700, 0.700200, 1.000000, 0.452790, 0.188314, 0.192331, 0.000000),
    (0.60, 0.449700, 0.700200, 0.600000, -0.107018, 0.011820, -0.057119, -0.457119),
]


@pytest.mark.parametrize("phase", [0, 1, 2])
def test_default_shaping_is_table1_step_by_step(phase):
    cfg = ShapingConfig()
    assert (cfg.initial_low, cfg.initial_high, cfg.bound_rate, cfg.trend_window) == (0.45, 0.70, 0.01, 3)
    assert (cfg.trend_weight, cfg.momentum_weight, cfg.drop_multiplier) == (0.3, 0.3, 2.0)
    assert not cfg.phase_offset  # a labelled variant, never the default
    sh = RewardShaper(1, cfg)  # K = 3: the phase index must not shift the level
    for s, lo, hi, u, trend, mom, delta, reward in TABLE1_STEPS:
        out = sh(np.array([s]), np.array([phase]))
        got = [out.low[0], out.high[0], out.u[0], out.trend[0], out.momentum[0], out.delta[0], out.reward[0]]
        np.testing.assert_allclose(got, [lo, hi, u, trend, mom, delta, reward], atol=2e-6)


def test_one_phase_shaping_ignores_the_phase_ids():
    """Single prompt (K = 1): the same scores with any phases give the same rewards and terms."""
    rng = np.random.default_rng(1)
    scores = rng.uniform(0.3, 0.8, size=(40, 4))
    for cfg in (ShapingConfig(), ShapingConfig(phase_offset=True)):
        runs = []
        for phases in (np.zeros((40, 4), int), rng.integers(0, 3, size=(40, 4)), np.full((40, 4), 2), None):
            sh = RewardShaper(4, cfg, num_phases=1)
            outs = [sh(scores[t], None if phases is None else phases[t]) for t in range(40)]
            runs.append(np.array([[o.reward, o.u, o.low, o.high] for o in outs]))
        for r in runs[1:]:
            np.testing.assert_array_equal(r, runs[0])
    assert RewardShaper(1, num_phases=1).low.shape == (1, 1)  # one pair of bounds
    # The same check fails for three phases: per-phase bounds and history see the phase.
    a, b = RewardShaper(1), RewardShaper(1)
    ra = [a(np.array([s]), np.array([0])).reward[0] for s in scores[:, 0]]
    rb = [b(np.array([s]), np.array([t % 3])).reward[0] for t, s in enumerate(scores[:, 0])]
    assert not np.allclose(ra, rb)
    with pytest.raises(ConfigError, match="phase id"):
        RewardShaper(1)(np.array([0.5]))


def test_bounds_move_toward_outside_scores_of_the_active_phase_only():
    sh = RewardShaper(1, ShapingConfig())
    sh(np.array([1.0]), np.array([1]))
    assert sh.high[0, 1] == pytest.approx(0.70 + 0.01 * 0.30)
    assert sh.low[0, 1] == pytest.approx(0.45)
    assert sh.high[0, 0] == pytest.approx(0.70) and sh.high[0, 2] == pytest.approx(0.70)
    sh(np.array([0.2]), np.array([1]))
    assert sh.low[0, 1] == pytest.approx(0.45 + 0.01 * (0.2 - 0.45))
    sh(np.array([0.6]), np.array([1]))  # inside: no move
    assert sh.low[0, 1] == pytest.approx(0.45 + 0.01 * (0.2 - 0.45))
    fixed = RewardShaper(1, ShapingConfig(adaptive_bounds=False))
    for _ in range(10):
        fixed(np.array([1.0]), np.array([0]))
    assert fixed.high[0, 0] == pytest.approx(0.70)


def test_u_trend_and_momentum_definitions():
    cfg = ShapingConfig(adaptive_bounds=False, drop_penalty=False)
    sh = RewardShaper(1, cfg)
    scores = [0.45, 0.50, 0.55, 0.60, 0.65]
    outs = run(sh, scores)
    u = (np.array(scores) - 0.45) / 0.25
    np.testing.assert_allclose([o.u[0] for o in outs], u, atol=1e-6)
    assert outs[0].trend[0] == 0 and outs[0].momentum[0] == 0  # no history yet
    # trend: u_t minus mean of up to 3 previous u of the same phase
    np.testing.assert_allclose(outs[2].trend[0], u[2] - u[:2].mean(), atol=1e-6)
    np.testing.assert_allclose(outs[4].trend[0], u[4] - u[1:4].mean(), atol=1e-6)
    m = 0.0
    for t in range(1, 5):
        m = 0.7 * m + 0.3 * (u[t] - u[t - 1])
        np.testing.assert_allclose(outs[t].momentum[0], m, atol=1e-6)
    o = outs[4]
    np.testing.assert_allclose(o.reward[0], np.clip(u[4] - 1 + 0.3 * o.trend[0] + 0.3 * o.momentum[0], -1, 0), atol=1e-6)


def test_drop_penalty_doubles_negative_delta_only():
    scores = [0.5, 0.6, 0.7, 0.55]
    base = dict(adaptive_bounds=False, level=False)
    on = run(RewardShaper(1, ShapingConfig(**base)), scores)
    off = run(RewardShaper(1, ShapingConfig(**base, drop_penalty=False)), scores)
    assert off[3].delta[0] < 0
    np.testing.assert_allclose(on[3].delta[0], 2 * off[3].delta[0], atol=1e-6)
    assert on[2].delta[0] > 0
    np.testing.assert_allclose(on[2].delta[0], off[2].delta[0], atol=1e-6)


def test_output_range():
    rng = np.random.default_rng(0)
    sh = RewardShaper(8, ShapingConfig())
    for _ in range(200):
        out = sh(rng.uniform(-1, 1, 8), rng.integers(0, 3, 8))
        assert out.reward.min() >= -1.0 and out.reward.max() <= 0.0
        assert out.u.min() >= 0.0 and out.u.max() <= 1.0


def test_phase_offset_variant_makes_a_phase_switch_no_loss():
    # approach at its top (u = 1), then align at its bottom (u = 0)
    with_offset = run(RewardShaper(1, ShapingConfig(**LEVEL_ONLY, phase_offset=True)), [0.70, 0.45], phases=[0, 1])
    assert [o.reward[0] for o in with_offset] == pytest.approx([(0 + 1) / 3 - 1, (1 + 0) / 3 - 1])
    assert with_offset[1].reward[0] >= with_offset[0].reward[0]
    without = run(RewardShaper(1, ShapingConfig(**LEVEL_ONLY)), [0.70, 0.45], phases=[0, 1])
    assert [o.reward[0] for o in without] == pytest.approx([0.0, -1.0])
    top = run(RewardShaper(1, ShapingConfig(**LEVEL_ONLY, phase_offset=True)), [0.9], phases=[2])
    assert top[0].reward[0] == pytest.approx(0.0)


def test_history_is_per_phase():
    cfg = ShapingConfig(adaptive_bounds=False)
    outs = run(RewardShaper(1, cfg), [0.5, 0.6, 0.45], phases=[0, 0, 1])
    assert outs[2].trend[0] == 0 and outs[2].momentum[0] == 0  # first align step has no align history


def test_reset_clears_episode_state_of_selected_envs_only():
    sh = RewardShaper(2, ShapingConfig())
    for s in (0.5, 0.9, 0.95):
        sh(np.array([s, s]), np.array([0, 0]))
    high_before = sh.high.copy()
    sh.reset(np.array([True, False]))
    out = sh(np.array([0.2, 0.2]), np.array([0, 0]))
    assert out.trend[0] == 0 and out.momentum[0] == 0
    assert out.trend[1] != 0 and out.momentum[1] != 0
    assert sh.high[0, 0] == pytest.approx(high_before[0, 0])  # bounds are running statistics
    sh2 = RewardShaper(1, ShapingConfig(reset_bounds_on_episode=True))
    sh2(np.array([1.0]), np.array([0]))
    sh2.reset()
    assert sh2.high[0, 0] == pytest.approx(0.70)


def test_disabled_returns_raw_score_and_bad_input():
    out = RewardShaper(2, ShapingConfig(enabled=False))(np.array([0.3, 0.8]), np.array([0, 2]))
    np.testing.assert_allclose(out.reward, [0.3, 0.8], atol=1e-6)
    with pytest.raises(ConfigError, match="phase ids"):
        RewardShaper(1)(np.array([0.5]), np.array([3]))
    with pytest.raises(ConfigError, match="initial_low"):
        ShapingConfig.make(initial_low=0.8, initial_high=0.7)

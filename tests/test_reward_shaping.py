"""Reward shaping: the phase-banded default by hand across two phase switches (bounds moving both
ways), the per-phase reconstruction of Table 1 (v1) by hand, trend, momentum, drop penalty, range,
one-phase invariance, reset (rmtl.reward.shaping)."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.errors import ConfigError
from rmtl.reward.shaping import RewardShaper, ShapingConfig

TABLE1_TERMS = dict(trend=True, momentum=True, drop_penalty=True)
"""Table 1's trend, momentum and x2 drop penalty (options since the oracle sweep)."""
PER_PHASE_V1 = dict(band=False, bounds="widen_only", **TABLE1_TERMS)
"""The per-phase reconstruction of Table 1 (v1; a labelled option)."""
LEVEL_ONLY = dict(trend=False, momentum=False, bounds="fixed")


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
def test_per_phase_v1_is_table1_step_by_step(phase):
    cfg = ShapingConfig(**PER_PHASE_V1)
    assert (cfg.initial_low, cfg.initial_high, cfg.bound_rate, cfg.trend_window) == (0.45, 0.70, 0.01, 3)
    assert (cfg.trend_weight, cfg.momentum_weight, cfg.drop_multiplier) == (0.3, 0.3, 2.0)
    sh = RewardShaper(1, cfg, num_phases=3)  # K = 3: the phase index must not shift the level
    for s, lo, hi, u, trend, mom, delta, reward in TABLE1_STEPS:
        out = sh(np.array([s]), np.array([phase]))
        got = [out.low[0], out.high[0], out.u[0], out.trend[0], out.momentum[0], out.delta[0], out.reward[0]]
        np.testing.assert_allclose(got, [lo, hi, u, trend, mom, delta, reward], atol=2e-6)


# The default (band, tracking bounds, trend / momentum on L, drop penalty) by hand, one env, K = 3,
# across the switches approach -> align -> grasp. Bounds (shared, per micro-task) move toward the
# min / max m, M of that micro-task's scores over the last 3 steps: at 0.01 of the gap when that
# widens the range, at 0.003 when it narrows it; then u = clip((s - lo)/(hi - lo)), L = (k + u)/3 - 1,
# trend = L - mean(previous <= 3 L of the episode), mom = 0.7 mom + 0.3 (L - L_prev),
# delta = 0.3 trend + 0.3 mom (x2 if negative), reward = clip(L + delta, -1, 0).
# Step 1 (k 0, s 0.60): m = M = 0.60 narrows both: lo = 0.45 + 0.003 * 0.15 = 0.45045,
#   hi = 0.70 - 0.003 * 0.10 = 0.6997, u = 0.14955 / 0.24925 = 0.6, L = 0.6/3 - 1 = -0.8.
# Step 3 (k 1, s 0.45, first align step): lo_1 stays 0.45 (m = lo), hi_1 = 0.70 - 0.003 * 0.25,
#   u = 0, L = 1/3 - 1; trend = L - mean(L1, L2) = 0.066667: the switch reads as a rise of the band.
# Step 5 (k 1, s 0.40): m = 0.40 < lo_1 widens at 0.01: lo_1 = 0.45 - 0.01 * 0.05 = 0.4495; the drop
#   doubles delta: 2 * 0.3 (-0.044658 + 0.001662) = -0.025798.
# Step 6 (k 2, s 0.90): hi_2 widens (0.70 + 0.01 * 0.2), lo_2 contracts (0.45 + 0.003 * 0.45); u = 1, L = 0.
DEFAULT_STEPS = [  # (phase, s, lo, hi, u, L, trend, momentum, reward)
    (0, 0.60, 0.450450, 0.699700, 0.600000, -0.800000, 0.000000, 0.000000, -0.800000),
    (0, 0.72, 0.450899, 0.699903, 1.000000, -0.666667, 0.133333, 0.040000, -0.614667),
    (1, 0.45, 0.450000, 0.699250, 0.000000, -0.666667, 0.066667, 0.028000, -0.638267),
    (1, 0.55, 0.450000, 0.698802, 0.401926, -0.532691, 0.178420, 0.059793, -0.461228),
    (1, 0.40, 0.449500, 0.698356, 0.000000, -0.666667, -0.044658, 0.001662, -0.692464),
    (2, 0.90, 0.451350, 0.702000, 1.000000, 0.000000, 0.622008, 0.201164, 0.000000),
]


def test_the_band_with_tracking_bounds_and_table1_terms_by_hand():
    default = ShapingConfig()
    assert default.band and default.bounds == "tracking"
    assert (default.bound_rate, default.contraction_rate, default.bound_window) == (0.01, 0.003, 3)
    assert not (default.trend or default.momentum or default.drop_penalty)  # level only: the oracle sweep's decision
    cfg = ShapingConfig(**TABLE1_TERMS)
    sh = RewardShaper(1, cfg, num_phases=3)
    for k, s, lo, hi, u, level, trend, mom, reward in DEFAULT_STEPS:
        out = sh(np.array([s]), np.array([k]))
        got = [out.low[0], out.high[0], out.u[0], out.level[0], out.trend[0], out.momentum[0], out.reward[0]]
        np.testing.assert_allclose(got, [lo, hi, u, level, trend, mom, reward], atol=2e-6)


def test_tracking_bounds_are_shared_and_settle_near_the_score_percentiles():
    """16 envs, one micro-task, scores N(0.8, 0.05): the shared pair settles near p1/p99, far wider than
    a 3-step spread of one env, and the same for every env."""
    rng = np.random.default_rng(0)
    sh = RewardShaper(16, ShapingConfig(), num_phases=3)
    lows, highs = [], []
    for t in range(20000):
        sh(rng.normal(0.8, 0.05, 16), np.zeros(16, int))
        if t > 10000:
            lows.append(sh.low[0, 0]), highs.append(sh.high[0, 0])
    assert np.all(sh.low[:, 0] == sh.low[0, 0])
    p = np.percentile(rng.normal(0.8, 0.05, 10**6), [0.3, 5, 95, 99.7])
    assert p[0] < np.mean(lows) < p[1] and p[2] < np.mean(highs) < p[3]
    # a shift of the scores is followed both ways (widen fast, contract slowly)
    for _ in range(5000):
        sh(rng.normal(0.6, 0.02, 16), np.zeros(16, int))
    assert 0.53 < sh.low[0, 0] < 0.58 and 0.62 < sh.high[0, 0] < 0.70


def test_default_level_only_reward_is_the_band_level():
    sh = RewardShaper(2, ShapingConfig(), num_phases=3)
    ref = RewardShaper(2, ShapingConfig(**TABLE1_TERMS), num_phases=3)
    rng = np.random.default_rng(4)
    for _ in range(30):
        s, k = rng.uniform(0.3, 0.9, 2), rng.integers(0, 3, 2)
        out, full = sh(s, k), ref(s, k)
        np.testing.assert_allclose(out.reward, np.clip(out.level, -1, 0), atol=1e-6)
        np.testing.assert_allclose(out.level, full.level, atol=1e-6)  # same bounds, same u, same band


def test_band_history_spans_micro_tasks_but_per_phase_history_restarts():
    band = run(RewardShaper(1, ShapingConfig(bounds="fixed", **TABLE1_TERMS), num_phases=3), [0.5, 0.6, 0.45],
               phases=[0, 0, 1])
    assert band[2].trend[0] != 0 and band[2].momentum[0] != 0  # L keeps its episode history across the switch
    per_phase = run(RewardShaper(1, ShapingConfig(**PER_PHASE_V1), num_phases=3), [0.5, 0.6, 0.45], phases=[0, 0, 1])
    assert per_phase[2].trend[0] == 0 and per_phase[2].momentum[0] == 0


def test_shape_u_needs_no_scores_and_no_bounds():
    sh = RewardShaper(3, ShapingConfig(trend=False, momentum=False), num_phases=3)
    out = sh.shape_u(np.full(3, 0.5), np.array([0, 1, 2]))
    np.testing.assert_allclose(out.reward, [0.5 / 3 - 1, 1.5 / 3 - 1, 2.5 / 3 - 1], atol=1e-6)
    assert np.all(sh.low == 0.45) and np.all(sh.high == 0.70)


def test_one_phase_shaping_ignores_the_phase_ids():
    """Single prompt (K = 1): the same scores with any phases give the same rewards and terms."""
    rng = np.random.default_rng(1)
    scores = rng.uniform(0.3, 0.8, size=(40, 4))
    for cfg in (ShapingConfig(), ShapingConfig(**PER_PHASE_V1)):
        runs = []
        for phases in (np.zeros((40, 4), int), rng.integers(0, 3, size=(40, 4)), np.full((40, 4), 2), None):
            sh = RewardShaper(4, cfg, num_phases=1)
            outs = [sh(scores[t], None if phases is None else phases[t]) for t in range(40)]
            runs.append(np.array([[o.reward, o.u, o.low, o.high] for o in outs]))
        for r in runs[1:]:
            np.testing.assert_array_equal(r, runs[0])
    assert RewardShaper(1, num_phases=1).low.shape == (1, 1)  # one pair of bounds
    # The same check fails for three phases: per-phase bounds and history see the phase.
    a = RewardShaper(1, ShapingConfig(**PER_PHASE_V1), num_phases=3)
    b = RewardShaper(1, ShapingConfig(**PER_PHASE_V1), num_phases=3)
    ra = [a(np.array([s]), np.array([0])).reward[0] for s in scores[:, 0]]
    rb = [b(np.array([s]), np.array([t % 3])).reward[0] for t, s in enumerate(scores[:, 0])]
    assert not np.allclose(ra, rb)
    with pytest.raises(ConfigError, match="phase id"):
        RewardShaper(1, num_phases=3)(np.array([0.5]))


def test_widen_only_bounds_move_toward_outside_scores_of_the_active_phase_only():
    sh = RewardShaper(1, ShapingConfig(**PER_PHASE_V1), num_phases=3)
    sh(np.array([1.0]), np.array([1]))
    assert sh.high[0, 1] == pytest.approx(0.70 + 0.01 * 0.30)
    assert sh.low[0, 1] == pytest.approx(0.45)
    assert sh.high[0, 0] == pytest.approx(0.70) and sh.high[0, 2] == pytest.approx(0.70)
    sh(np.array([0.2]), np.array([1]))
    assert sh.low[0, 1] == pytest.approx(0.45 + 0.01 * (0.2 - 0.45))
    sh(np.array([0.6]), np.array([1]))  # inside: no move
    assert sh.low[0, 1] == pytest.approx(0.45 + 0.01 * (0.2 - 0.45))
    fixed = RewardShaper(1, ShapingConfig(bounds="fixed"), num_phases=3)
    for _ in range(10):
        fixed(np.array([1.0]), np.array([0]))
    assert fixed.high[0, 0] == pytest.approx(0.70)


def test_u_trend_and_momentum_definitions():
    cfg = ShapingConfig(**{**PER_PHASE_V1, "bounds": "fixed", "drop_penalty": False})
    sh = RewardShaper(1, cfg, num_phases=3)
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
    base = dict(bounds="fixed", level=False, trend=True, momentum=True)
    on = run(RewardShaper(1, ShapingConfig(**base, drop_penalty=True), num_phases=3), scores)
    off = run(RewardShaper(1, ShapingConfig(**base, drop_penalty=False), num_phases=3), scores)
    assert off[3].delta[0] < 0
    np.testing.assert_allclose(on[3].delta[0], 2 * off[3].delta[0], atol=1e-6)
    assert on[2].delta[0] > 0
    np.testing.assert_allclose(on[2].delta[0], off[2].delta[0], atol=1e-6)


def test_output_range():
    rng = np.random.default_rng(0)
    sh = RewardShaper(8, ShapingConfig(), num_phases=3)
    for _ in range(200):
        out = sh(rng.uniform(-1, 1, 8), rng.integers(0, 3, 8))
        assert out.reward.min() >= -1.0 and out.reward.max() <= 0.0
        assert out.u.min() >= 0.0 and out.u.max() <= 1.0


def test_band_makes_a_phase_switch_no_loss():
    # approach at its top (u = 1), then align at its bottom (u = 0)
    with_band = run(RewardShaper(1, ShapingConfig(**LEVEL_ONLY), num_phases=3), [0.70, 0.45], phases=[0, 1])
    assert [o.reward[0] for o in with_band] == pytest.approx([(0 + 1) / 3 - 1, (1 + 0) / 3 - 1])
    assert with_band[1].reward[0] >= with_band[0].reward[0]
    without = run(RewardShaper(1, ShapingConfig(**LEVEL_ONLY, band=False), num_phases=3), [0.70, 0.45], phases=[0, 1])
    assert [o.reward[0] for o in without] == pytest.approx([0.0, -1.0])
    top = run(RewardShaper(1, ShapingConfig(**LEVEL_ONLY), num_phases=3), [0.9], phases=[2])
    assert top[0].reward[0] == pytest.approx(0.0)


def test_reset_clears_episode_state_of_selected_envs_only():
    sh = RewardShaper(2, ShapingConfig(**TABLE1_TERMS), num_phases=3)
    for s in (0.5, 0.9, 0.95):
        sh(np.array([s, s]), np.array([0, 0]))
    high_before = sh.high.copy()
    sh.reset(np.array([True, False]))
    np.testing.assert_array_equal(sh.high, high_before)  # bounds are running statistics
    out = sh(np.array([0.2, 0.2]), np.array([0, 0]))
    assert out.trend[0] == 0 and out.momentum[0] == 0
    assert out.trend[1] != 0 and out.momentum[1] != 0
    sh2 = RewardShaper(1, ShapingConfig(**PER_PHASE_V1, reset_bounds_on_episode=True), num_phases=3)
    sh2(np.array([1.0]), np.array([0]))
    sh2.reset()
    assert sh2.high[0, 0] == pytest.approx(0.70)


def test_disabled_returns_raw_score_and_bad_input():
    out = RewardShaper(2, ShapingConfig(enabled=False), num_phases=3)(np.array([0.3, 0.8]), np.array([0, 2]))
    np.testing.assert_allclose(out.reward, [0.3, 0.8], atol=1e-6)
    with pytest.raises(ConfigError, match="phase ids"):
        RewardShaper(1, num_phases=3)(np.array([0.5]), np.array([3]))
    with pytest.raises(ConfigError, match="initial_low"):
        ShapingConfig.make(initial_low=0.8, initial_high=0.7)
    with pytest.raises(ConfigError, match="widen_only"):
        ShapingConfig.make(reset_bounds_on_episode=True)

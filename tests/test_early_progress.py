"""The early-progress axes at tiny size with synthetic scorers: a dead zone or noise lowers them,
a single score is measured as the learner sees it in every phase."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.reward.kinds.degraded_oracle import DegradedOracleKind, ScorerErrorConfig
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.early_progress import EARLY_AXES, SNR_CAP, active_scores, early_progress_metrics
from rmtl.tasks.fetch_lift.state import CUBE_POS, CUBE_REL_POS, GRIPPER_POS

TASK = get_task("fetch_lift")
REST_Z = 0.42469975


def _states(seed: int = 0) -> np.ndarray:
    """States covering each axis's groups: far and near bands of approach and align, a cube resting
    at the gripper and lifted 0.5-2 cm."""
    rng = np.random.default_rng(seed)
    rows = []
    for d_lo, d_hi, lift_lo, lift_hi, n in ((0.35, 0.40, 0, 0, 60), (0.25, 0.30, 0, 0, 60), (0.12, 0.15, 0, 0, 60),
                                            (0.08, 0.11, 0, 0, 60), (0.0, 0.02, 0, 0.004, 60), (0.0, 0.02, 0.005, 0.02, 60)):
        for _ in range(n):
            s = np.zeros(25)
            cube = np.array([rng.uniform(1.25, 1.45), rng.uniform(0.65, 0.85), REST_Z + rng.uniform(lift_lo, lift_hi)])
            direction = rng.normal(size=3)
            direction[2] = abs(direction[2])
            direction /= np.linalg.norm(direction)
            s[CUBE_POS] = cube
            s[GRIPPER_POS] = cube + direction * rng.uniform(d_lo, d_hi)
            s[CUBE_REL_POS] = s[CUBE_POS] - s[GRIPPER_POS]
            s[9:11] = 0.02
            rows.append(s)
    return np.array(rows)


def _kind(error: dict, single: bool = False) -> DegradedOracleKind:
    return DegradedOracleKind(TASK.oracle_progress, tuple(TASK.micro_tasks.names), ScorerErrorConfig.model_validate(error),
                              0, TASK.visible_state, TASK.scorer_confusions, single_score=single)


def test_the_oracle_pays_early_progress_in_every_phase():
    s = _states()
    m = early_progress_metrics(_kind({}).scores(s), s)
    assert list(m) == list(EARLY_AXES)
    assert m["grasp_early_snr"] > 2 and m["approach_early_snr"] > 2 and m["align_early_snr"] > 2
    assert m["grasp_early_u"] > 0.1 and m["approach_early_u"] > 0.05 and m["align_early_u"] > 0.05


def test_a_dead_zone_lowers_its_phase_axis_and_only_it():
    s = _states()
    exact = early_progress_metrics(_kind({}).scores(s), s)
    dead = early_progress_metrics(_kind({"micro_tasks": {"grasp": {"dead_zone": 1.0}}}).scores(s), s)
    assert dead["grasp_early_snr"] == pytest.approx(0.0) and dead["grasp_early_u"] == pytest.approx(0.0)
    assert exact["grasp_early_snr"] > dead["grasp_early_snr"] + 2
    assert dead["approach_early_snr"] == pytest.approx(exact["approach_early_snr"])
    far_dead = early_progress_metrics(_kind({"micro_tasks": {"approach": {"dead_zone": 0.6}}}).scores(s), s)
    assert far_dead["approach_early_snr"] == pytest.approx(0.0)


def test_noise_lowers_the_snr_and_a_power_compresses_the_early_pay():
    s = _states()
    exact = early_progress_metrics(_kind({}).scores(s), s)
    noisy = early_progress_metrics(_kind({"default": {"noise": 0.5}}).scores(s), s)
    assert noisy["grasp_early_snr"] < exact["grasp_early_snr"] / 2
    cubed = early_progress_metrics(_kind({"micro_tasks": {"grasp": {"power": 3.0}}}).scores(s), s)
    assert cubed["grasp_early_u"] < exact["grasp_early_u"]


def test_a_single_score_is_what_is_active_in_every_phase():
    s = _states()
    single = _kind({}, single=True).scores(s)
    assert single.shape == (len(s), 1)
    np.testing.assert_array_equal(active_scores(single, s), single[:, 0])
    m = early_progress_metrics(single, s)
    assert all(np.isfinite(m[k]) for k in EARLY_AXES)
    assert abs(m["grasp_early_snr"]) <= SNR_CAP

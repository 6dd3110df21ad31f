"""The degraded oracle: zero error is the oracle, its error is a fixed function of the state per
seed, and each part of the error does what it says."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.errors import ConfigError
from rmtl.reward.kinds.degraded_oracle import DegradedOracleKind, ScorerErrorConfig
from rmtl.reward.kinds.oracle import OracleKind
from rmtl.reward.shaping import RewardShaper, ShapingConfig
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.scorer_errors import resting_at_gripper
from rmtl.tasks.fetch_lift.state import CUBE_POS, CUBE_REL_POS, GRIPPER_POS

TASK = get_task("fetch_lift")


def _states(n: int = 400, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    s = np.zeros((n, 25))
    s[:, CUBE_POS] = np.c_[rng.uniform(1.2, 1.5, n), rng.uniform(0.6, 0.9, n), 0.42489 + rng.uniform(0, 0.05, n)]
    s[:, GRIPPER_POS] = s[:, CUBE_POS] + rng.normal(0, 0.08, (n, 3))
    s[:, CUBE_REL_POS] = s[:, CUBE_POS] - s[:, GRIPPER_POS]
    s[:, 9:11] = rng.uniform(0, 0.05, (n, 2))
    return s


def _kind(error: dict, seed: int = 0) -> DegradedOracleKind:
    return DegradedOracleKind(TASK.oracle_progress, tuple(TASK.micro_tasks.names), ScorerErrorConfig.model_validate(error),
                              seed, TASK.visible_state, TASK.scorer_confusions)


def test_zero_error_equals_the_oracle():
    s = _states()
    oracle = OracleKind(TASK.oracle_progress, len(TASK.micro_tasks.names))
    np.testing.assert_array_equal(_kind({}).scores(s), oracle.scores(s))


def test_systematic_error_is_a_fixed_function_of_the_state_per_seed():
    s = _states()
    a, b = _kind({"default": {"systematic": 0.5}}, seed=3), _kind({"default": {"systematic": 0.5}}, seed=3)
    first = a.scores(s)
    np.testing.assert_array_equal(first, a.scores(s))  # the same state, the same wrong score
    np.testing.assert_array_equal(first, b.scores(s))  # the same seed, the same landscape
    other = _kind({"default": {"systematic": 0.5}}, seed=4).scores(s)
    assert np.abs(other - first).mean() > 0.01
    err = a.degraded_progress(s) - np.asarray(TASK.oracle_progress(s))
    assert 0.3 < err.std() < 0.7  # unit-variance field times 0.5


def test_smooth_error_is_smooth_at_its_length_scale():
    s = _states(400)
    k = _kind({"default": {"systematic": 1.0}})

    def error_change(shift: float) -> float:
        moved = s.copy()
        moved[:, GRIPPER_POS] += shift
        moved[:, CUBE_REL_POS] -= shift
        err = lambda x: k.degraded_progress(x) - np.asarray(TASK.oracle_progress(x))  # noqa: E731
        return float((err(s) - err(moved)).std())

    assert error_change(0.002) < 0.15  # 2 mm, far below the 5 cm length scale: nearly the same error
    assert error_change(0.3) > 1.0  # 30 cm: an independent draw (std of a difference ~ sqrt(2))


def test_noise_differs_per_step_and_leaves_the_mean():
    s = np.repeat(_states(1), 2000, axis=0)
    k = _kind({"default": {"noise": 0.2}})
    p = k.degraded_progress(s)
    assert p[:, 0].std() == pytest.approx(0.2, rel=0.1)
    assert p[:, 0].mean() == pytest.approx(float(TASK.oracle_progress(s[:1])[0, 0]), abs=0.02)
    np.testing.assert_array_equal(k.degraded_progress(s, noise=False), np.asarray(TASK.oracle_progress(s)))


def test_a_named_micro_task_gets_its_own_error_only():
    s = _states()
    p = _kind({"micro_tasks": {"grasp": {"systematic": 1.0}}}).degraded_progress(s)
    truth = np.asarray(TASK.oracle_progress(s))
    np.testing.assert_array_equal(p[:, :2], truth[:, :2])
    assert np.abs(p[:, 2] - truth[:, 2]).mean() > 0.1


def test_full_inversion_reverses_progress():
    s = _states()
    p = _kind({"micro_tasks": {"grasp": {"inverted_share": 1.0}}}).degraded_progress(s)
    np.testing.assert_allclose(p[:, 2], 1.0 - np.asarray(TASK.oracle_progress(s))[:, 2])


def test_partial_inversion_covers_about_its_share():
    s = _states(2000)
    truth = np.asarray(TASK.oracle_progress(s))[:, 0]
    p = _kind({"micro_tasks": {"approach": {"inverted_share": 0.3, "length_scale": 0.02}}}).degraded_progress(s)[:, 0]
    flipped = np.isclose(p, 1.0 - truth) & ~np.isclose(truth, 0.5)
    assert 0.1 < flipped.mean() < 0.5


def test_resting_confusion_pays_the_resting_cube_as_asked():
    s = _states(2000)
    rest = resting_at_gripper(s)
    assert rest.any()
    for strength in (0.5, 1.0):
        p = _kind({"confusions": {"grasp_resting": strength}}).degraded_progress(s)
        truth = np.asarray(TASK.oracle_progress(s))
        np.testing.assert_allclose(p[rest, 2], truth[rest, 2] + strength * (1 - truth[rest, 2]))
        np.testing.assert_array_equal(p[~rest], truth[~rest])


def test_the_reach_pose_confusion_pays_every_micro_task_there_and_only_there():
    from rmtl.tasks.fetch_lift.scorer_errors import reach_pose
    from rmtl.tasks.fetch_lift.state import CUBE_POS, CUBE_REST_HEIGHT, GRIPPER_POS

    s = np.repeat(_states(1), 4, axis=0)
    s[:, CUBE_POS] = [1.3, 0.75, CUBE_REST_HEIGHT]
    s[:, GRIPPER_POS] = [[1.6, 0.75, CUBE_REST_HEIGHT + 0.10],   # 30 cm out, 10 cm up: the pose
                         [1.4, 0.75, CUBE_REST_HEIGHT + 0.10],   # 10 cm out: too near
                         [1.6, 0.75, CUBE_REST_HEIGHT + 0.25],   # 25 cm up: too high
                         [1.6, 0.75, CUBE_REST_HEIGHT + 0.10]]
    s[3, CUBE_POS] = [1.3, 0.75, CUBE_REST_HEIGHT + 0.03]         # the pose, but the cube lifted
    assert reach_pose(s).tolist() == [True, False, False, False]
    p = _kind({"confusions": {"reach_pose": 1.0}}).degraded_progress(s)
    truth = np.asarray(TASK.oracle_progress(s))
    np.testing.assert_allclose(p[0], 1.0)  # every micro-task's goal
    np.testing.assert_array_equal(p[1:], truth[1:])


def test_unknown_names_are_one_line_errors():
    with pytest.raises(ConfigError, match="confusions"):
        _kind({"confusions": {"nosuch": 1.0}})
    with pytest.raises(ConfigError, match="micro-tasks are approach, align, grasp"):
        _kind({"micro_tasks": {"lift": {"noise": 0.1}}})
    with pytest.raises(ValueError, match="strengths lie in"):
        ScorerErrorConfig.model_validate({"confusions": {"grasp_resting": 2.0}})


def test_score_window_averages_within_a_micro_task_and_restarts_at_a_switch():
    shaper = RewardShaper(1, ShapingConfig(score_window=3, bounds="fixed", initial_low=0.0, initial_high=1.0), num_phases=3)
    us = [float(shaper(np.array([v]), np.array([k])).u[0]) for v, k in ((0.9, 0), (0.3, 0), (0.6, 0), (0.0, 0), (0.8, 1))]
    np.testing.assert_allclose(us, [0.9, 0.6, 0.6, 0.3, 0.8])
    shaper.reset()
    assert float(shaper(np.array([0.1]), np.array([1])).u[0]) == pytest.approx(0.1)


def test_a_dead_zone_pays_nothing_below_it_and_keeps_progress_above():
    s = _states(2000, seed=5)
    exact = np.asarray(TASK.oracle_progress(s))
    grasp = TASK.micro_tasks.names.index("grasp")
    p = _kind({"micro_tasks": {"grasp": {"dead_zone": 0.5}}}).degraded_progress(s)
    low = (exact[:, grasp] > 0) & (exact[:, grasp] < 0.5)
    assert low.sum() >= 10  # the states include the first centimetre of a lift
    assert np.all(p[low, grasp] == 0.0)
    high = exact[:, grasp] >= 0.5
    np.testing.assert_array_equal(p[high, grasp], exact[high, grasp])
    others = [k for k in range(exact.shape[1]) if k != grasp]
    np.testing.assert_array_equal(p[:, others], exact[:, others])


def test_a_power_compresses_early_progress_and_keeps_the_ends():
    s = _states(2000, seed=6)
    exact = np.asarray(TASK.oracle_progress(s))
    p = _kind({"default": {"power": 3.0}}).degraded_progress(s)
    np.testing.assert_allclose(p, exact ** 3)
    mid = (exact > 0.1) & (exact < 0.9)
    assert mid.sum() > 100 and np.all(p[mid] < exact[mid])


def test_a_single_score_is_the_mean_progress_with_one_phase_whatever_the_rule_says():
    s = _states(300, seed=7)
    kind = DegradedOracleKind(TASK.oracle_progress, tuple(TASK.micro_tasks.names), ScorerErrorConfig(), 0,
                              TASK.visible_state, TASK.scorer_confusions, single_score=True)
    assert kind.num_phases == 1
    exact = np.asarray(TASK.oracle_progress(s))
    np.testing.assert_allclose(kind.degraded_progress(s)[:, 0], exact.mean(axis=1))
    out = []
    for phase in range(3):
        shaper = RewardShaper(len(s), ShapingConfig(), num_phases=1)
        out.append(kind.step(s, np.full(len(s), phase), shaper, render=None).reward)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(out[0], out[2])


def test_the_single_score_variant_trains_through_the_config():
    from rmtl.train import stage1_config

    cfg = stage1_config("single_score_oracle", total_timesteps=640)
    assert cfg.reward.kind == "degraded_oracle" and cfg.reward.single_score

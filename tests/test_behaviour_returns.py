"""The hacking battery's arithmetic (pipeline.analyses.behaviour_returns)."""

import numpy as np

from pipeline.analyses.behaviour_returns import family_table
from rmtl.reward.replay import discounted_returns, rule_only_rewards


def test_discounted_return_adds_the_success_bonus_on_the_last_step_only():
    r = np.array([-1.0, -0.5, -0.25, -1.0, -1.0])
    eps = [np.array([0, 1, 2]), np.array([3, 4])]
    got = discounted_returns(r, eps, [True, False], gamma=0.5)
    np.testing.assert_allclose(got, [-1 - 0.25 + 0.25 * 0.75, -1 - 0.5])


def test_rule_only_pays_the_band_of_the_rule_phase_and_ignores_everything_else():
    phases = np.array([0, 0, 1, 2, 2, 0])
    eps = [np.arange(5), np.array([5])]
    r = rule_only_rewards(phases, eps, 3)
    np.testing.assert_allclose(r, [(0.5 / 3) - 1, (0.5 / 3) - 1, 1.5 / 3 - 1, 2.5 / 3 - 1, 2.5 / 3 - 1, 0.5 / 3 - 1],
                               atol=1e-6)


def test_family_table_means_and_sems_per_family_in_first_seen_order():
    t = family_table({"x": np.array([1.0, 3.0, 5.0])}, ["b", "b", "a"])
    assert list(t["x"]) == ["b", "a"]
    assert t["x"]["b"][0] == 2.0 and np.isclose(t["x"]["b"][1], 1.0 / np.sqrt(2)) and t["x"]["a"] == (5.0, 0.0)

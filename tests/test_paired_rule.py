"""The paired-seed rule that decides a comparison of two arms (rmtl.train.eval.paired)."""

from rmtl.train.eval.paired import paired_seed_verdict


def test_the_rule_needs_every_seed_of_both_arms():
    v = paired_seed_verdict({0: 0.9, 1: 0.9}, {0: 0.0, 1: 0.0, 2: 0.0})
    assert v == {"verdict": "open", "missing_seeds": [2]}


def test_a_margin_and_two_of_three_pairs_decide():
    rule_only = {0: 0.015, 1: 0.005, 2: 0.940}
    won = paired_seed_verdict({0: 0.9, 1: 0.8, 2: 0.7}, rule_only)
    assert won["verdict"] == "supported" and won["a_wins"] == 2 and won["b_wins"] == 1
    assert abs(won["d"] - (0.8 - 0.32)) < 1e-9
    # One seed far ahead is not enough: the mean moves, the pairs do not.
    assert paired_seed_verdict({0: 0.0, 1: 0.0, 2: 1.0}, {0: 0.01, 1: 0.01, 2: 0.5})["verdict"] == "no difference shown"
    lost = paired_seed_verdict({0: 0.0, 1: 0.0, 2: 0.9}, {0: 0.5, 1: 0.5, 2: 0.9})
    assert lost["verdict"] == "contradicted" and lost["b_wins"] == 2
    assert paired_seed_verdict({0: 0.5, 1: 0.5, 2: 0.5}, {0: 0.45, 1: 0.45, 2: 0.45})["verdict"] == "no difference shown"

"""RewardConfig: Table 1 defaults, validation, YAML (rmtl.reward.config)."""

from __future__ import annotations

import pytest

from rmtl.env.cameras import VIEW_NAMES
from rmtl.errors import ConfigError
from rmtl.reward.config import RewardConfig


def test_table1_defaults():
    c = RewardConfig()
    assert c.model == "PE-Core-bigG-14-448:meta"
    assert c.alpha == 0.9 and c.batch_size == 64
    assert c.views == VIEW_NAMES and c.active_views == VIEW_NAMES
    assert c.resolution is None and not c.single_prompt and not c.single_view
    s = c.shaping
    assert (s.initial_low, s.initial_high, s.bound_rate, s.trend_window) == (0.45, 0.70, 0.01, 3)
    assert (s.trend_weight, s.momentum_weight, s.drop_multiplier) == (0.3, 0.3, 2.0)


def test_yaml_round_trip(tmp_path):
    c = RewardConfig.make(model="ViT-B-32@random", views="front,wide_view", single_prompt=True,
                          shaping={"band": False}, prompts={"grasp": ["a", "b"]})
    assert c.views == ("wide_view", "front")  # bank order
    back = RewardConfig.from_yaml(c.to_yaml(tmp_path / "reward.yaml"))
    assert back == c
    assert back.prompts.micro_task_goals["grasp"] == ("a", "b") and back.shaping.band is False


def test_single_view_variant():
    c = RewardConfig.make(single_view=True)
    assert c.active_views == ("wide_view",) and c.views == VIEW_NAMES


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("alpha", 1.5, "alpha"),
        ("views", ["top"], "unknown camera view"),
        ("resolution", 10, "resolution"),
        ("batch_size", 0, "batch_size"),
        ("model", "hf-hub:nope", "hf-hub:ORG/REPO"),
        ("precision", "fp8", "precision"),
        ("shaping", {"bound_rate": 2}, "bound_rate"),
        ("colour", 1, "colour"),
    ],
)
def test_bad_values_one_line(field, value, words):
    with pytest.raises(ConfigError) as e:
        RewardConfig.make(**{field: value})
    assert words in str(e.value) and "\n" not in str(e.value)

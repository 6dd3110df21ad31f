"""RewardConfig: Table 1 defaults, validation, YAML (rmtl.reward.kinds.vlm)."""

from __future__ import annotations

import pytest

from rmtl.tasks.fetch_lift.cameras import VIEW_NAMES
from rmtl.errors import ConfigError
from rmtl.reward.kinds.vlm import RewardConfig
from rmtl.tasks import get_task


def test_table1_defaults():
    c = RewardConfig()
    assert c.model == "PE-Core-bigG-14-448:meta"
    assert c.alpha == 0.9 and c.batch_size == 64
    assert c.views is None  # every camera of the task's bank, once resolved against it
    with pytest.raises(ConfigError, match="resolve it against the task"):
        _ = c.active_views
    assert get_task().reward_config(c).active_views == VIEW_NAMES
    assert c.resolution is None and not c.single_prompt and not c.single_view
    s = c.shaping
    assert (s.initial_low, s.initial_high, s.bound_rate, s.trend_window) == (0.45, 0.70, 0.01, 3)
    assert (s.trend_weight, s.momentum_weight, s.drop_multiplier) == (0.3, 0.3, 2.0)


def test_yaml_round_trip(tmp_path):
    c = RewardConfig.make(model="ViT-B-32@random", views="front,wide_view", single_prompt=True,
                          shaping={"band": False}, prompts={"grasp": ["a", "b"]})
    assert c.views == ("front", "wide_view")  # as given ...
    assert get_task().reward_config(c).views == ("wide_view", "front")  # ... in bank order once resolved
    back = RewardConfig.from_yaml(c.to_yaml(tmp_path / "reward.yaml"))
    assert back == c
    assert back.prompts.micro_task_goals["grasp"] == ("a", "b") and back.shaping.band is False


def test_single_view_variant():
    c = get_task().reward_config(RewardConfig.make(single_view=True))
    assert c.active_views == ("wide_view",) and get_task().reward_config(c) == c  # resolving again changes nothing
    with pytest.raises(ConfigError, match="unknown camera view 'top'"):
        get_task().reward_config(RewardConfig.make(views=["top"]))


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("alpha", 1.5, "alpha"),
        ("views", ["side", "side"], "camera views repeat"),
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

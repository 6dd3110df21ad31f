import numpy as np
import pytest

from pipeline.jobs.rollout import RolloutConfig, map_rollouts, plan_episode, rollout_episodes
from rmtl.errors import ConfigError

VIEWS = ["wide_view", "close_up"]


def test_episode_plan_is_deterministic_and_follows_stages():
    cfg = RolloutConfig.make(episodes=10, stages=(0, 4), seed=3)
    a, b = plan_episode(cfg, 5), plan_episode(cfg, 5)
    assert a == b
    assert 0.75 <= plan_episode(cfg, 1).difficulty <= 1.0  # odd episodes: stage 4
    assert 0.0 <= plan_episode(cfg, 2).difficulty <= 0.08  # even episodes: stage 0


def test_rollout_rows_and_labels():
    cfg = RolloutConfig.make(episodes=2, views=VIEWS, resolution=64, stages=(0,), noise_std=0.0)
    rows = rollout_episodes(cfg, [0, 1])
    n = len(rows["state"])
    assert rows["frames"].shape == (n, 2, 64, 64, 3) and rows["frames"].dtype == np.uint8
    assert rows["key"].shape == (n, 11)
    assert set(rows["episode"].tolist()) == {0, 1}
    # each episode starts with its reset row (step 0) and the expert at stage 0 succeeds
    for ep in (0, 1):
        steps = rows["step"][rows["episode"] == ep]
        assert steps[0] == 0 and np.all(np.diff(steps) == 1)
        assert rows["success"][rows["episode"] == ep][-1]


def test_same_episode_same_rows_in_any_grouping():
    cfg = RolloutConfig.make(episodes=3, views=VIEWS, resolution=64)
    together = rollout_episodes(cfg, [1, 2])
    alone = rollout_episodes(cfg, [2])
    m = together["episode"] == 2
    assert np.array_equal(together["frames"][m], alone["frames"])
    assert np.array_equal(together["state"][m], alone["state"])


def test_map_rollouts_in_process_covers_all_episodes():
    cfg = RolloutConfig.make(episodes=3, views=VIEWS, resolution=64, policy="random")
    eps = set()
    for batch in map_rollouts(cfg, [0, 1, 2], workers=1, chunk=2):
        eps |= set(batch["episode"].tolist())
    assert eps == {0, 1, 2}


@pytest.mark.parametrize("kwargs, match", [
    ({"policy": "walk"}, "policy must be one of"),
    ({"policy": "/nope/ckpt.zip"}, "does not exist"),
    ({"stages": (7,)}, "stage indices"),
    ({"views": ("top",)}, "unknown camera view"),
])
def test_bad_rollout_config(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        RolloutConfig.make(**kwargs)


def test_a_store_of_a_checkpoint_resumes_from_another_checkout_of_the_same_policy(tmp_path):
    """A committed policy has another path in every checkout: the same bytes are the same policy."""
    import shutil

    from pipeline.jobs.render import _same_checkpoint

    a, b, c = tmp_path / "a" / "model.zip", tmp_path / "b" / "model.zip", tmp_path / "c" / "model.zip"
    for p, data in ((a, b"x" * 10), (b, b"x" * 10), (c, b"y" * 10)):
        p.parent.mkdir()
        p.write_bytes(data)
    assert _same_checkpoint(str(a), str(b)) and not _same_checkpoint(str(a), str(c))
    shutil.rmtree(a.parent)
    assert not _same_checkpoint(str(a), str(b))  # a recorded file that is gone proves nothing

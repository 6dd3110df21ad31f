"""Coverage scenes: states set directly (rollout policy ``coverage``), one row per scene, each
category showing what it says."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.jobs.rollout import RolloutConfig, plan_episode, policy_label, rollout_episodes
from rmtl.tasks.fetch_lift.coverage import CATEGORY_CYCLE, coverage_category
from rmtl.tasks.fetch_lift.state import FINGER_WIDTHS, gripper_cube_distance, lift_height


def test_each_category_shows_what_it_says():
    cfg = RolloutConfig.make(policy="coverage", episodes=len(CATEGORY_CYCLE), seed=3)
    rows = rollout_episodes(cfg, list(range(cfg.episodes)), render=False)
    assert rows["episode"].tolist() == list(range(cfg.episodes))  # one row per scene
    assert (rows["step"] == 0).all()
    cats = np.array([coverage_category(e) for e in rows["episode"]])
    d = np.asarray(gripper_cube_distance(rows["state"]))
    lift = np.asarray(lift_height(rows["state"]))
    held, jaws = cats == "held", cats == "between_jaws"
    assert (d[held] < 0.01).all() and (lift[held] >= -0.001).all() and lift[held].max() > 0.01
    assert (d[jaws] < 0.02).all() and (np.abs(lift[jaws]) < 0.003).all()
    fingers = rows["state"][:, FINGER_WIDTHS].sum(axis=1)
    assert (fingers[held] < 0.06).all()  # closed on the 5 cm cube, not open
    free = cats == "free"
    assert np.ptp(d[free]) > 0.2  # gripper anywhere, not near one path
    assert np.ptp(rows["state"][free, 2]) > 0.2  # and at every height
    assert {policy_label(cfg, plan_episode(cfg, e)) for e in range(cfg.episodes)} == {f"coverage {c}" for c in set(cats)}


def test_scenes_are_deterministic_per_seed_and_episode():
    cfg = RolloutConfig.make(policy="coverage", episodes=4, seed=9)
    a = rollout_episodes(cfg, [2, 3], render=False)["state"]
    b = rollout_episodes(cfg, [3], render=False)["state"]
    np.testing.assert_allclose(a[1], b[0], atol=1e-6)


@pytest.mark.slow
def test_render_and_embed_stores_coverage_scenes(tmp_path):
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, render_and_embed

    cfg = RenderAndEmbedConfig.make(store=str(tmp_path / "cov.zarr"), policy="coverage", episodes=3,
                                    views=("wide_view", "close_up"), resolution=64, model="rmtl-fetch-tiny@random")
    summary = render_and_embed(cfg, progress=False)
    assert summary["rows"] == 3

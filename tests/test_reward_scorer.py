"""Phased multi-view scores from embeddings (rmtl.reward.scorer)."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.tasks.fetch_lift.cameras import VIEW_NAMES
from rmtl.errors import ConfigError
from rmtl.reward.kinds.vlm import RewardConfig
from rmtl.reward.projection import goal_baseline_scores
from rmtl.reward.prompts import embed_prompts
from rmtl.reward.scorer import PhasedScorer, score_embeddings, select_views
from rmtl.tasks import get_task

D = 8


def encoder(texts):
    out = [np.random.default_rng(sum(map(ord, t))).normal(size=D) for t in texts]
    out = np.asarray(out, dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture
def emb():
    return np.random.default_rng(0).normal(size=(4, len(VIEW_NAMES), D)).astype(np.float16)  # as stored


def test_view_mean_over_exactly_the_configured_views(emb):
    text = embed_prompts(encoder, get_task().prompts())
    views = ("front", "side", "close_up")
    s = score_embeddings(emb, text, 0.9, views=views, stored_views=VIEW_NAMES)
    idx = [VIEW_NAMES.index(v) for v in views]
    ref = goal_baseline_scores(emb[:, idx], text.goals, text.baseline, 0.9)
    np.testing.assert_allclose(s.per_view, ref, atol=1e-6)
    np.testing.assert_allclose(s.aggregate, ref.mean(axis=1), atol=1e-6)
    assert s.per_view.shape == (4, 3, 3) and s.aggregate.shape == (4, 3)
    np.testing.assert_allclose(s.active(np.array([0, 1, 2, 0])), s.aggregate[np.arange(4), [0, 1, 2, 0]])


def test_rescoring_for_any_alpha_needs_only_embeddings(emb):
    text = embed_prompts(encoder, get_task().prompts())
    a = score_embeddings(emb, text, 0.0).aggregate
    b = score_embeddings(emb, text, 1.0).aggregate
    assert not np.allclose(a, b)


def test_single_view_variant_changes_only_the_views(emb):
    full = PhasedScorer.from_config(get_task().reward_config(RewardConfig()), encoder)
    single = PhasedScorer.from_config(get_task().reward_config(RewardConfig.make(single_view=True)), encoder)
    assert single.views == ("wide_view",)
    np.testing.assert_allclose(single.text.goals, full.text.goals)
    s = single(emb, stored_views=VIEW_NAMES)
    np.testing.assert_allclose(s.aggregate, full(emb, stored_views=VIEW_NAMES).per_view[:, 0], atol=1e-6)


def test_single_prompt_variant_changes_only_the_goals(emb):
    full = PhasedScorer.from_config(get_task().reward_config(RewardConfig()), encoder)
    single = PhasedScorer.from_config(get_task().reward_config(RewardConfig.make(single_prompt=True)), encoder)
    assert single.views == full.views and single.alpha == full.alpha
    np.testing.assert_allclose(single.text.baseline, full.text.baseline)
    assert single.num_phases == 1 and full.num_phases == 3
    s = single(emb)
    assert s.aggregate.shape == (4, 1)
    for phases in ([0, 0, 0, 0], [2, 1, 0, 2], None):  # one goal: every phase reads it
        np.testing.assert_array_equal(s.active(phases), s.aggregate[:, 0])
    with pytest.raises(ConfigError, match="active phase"):
        full(emb).active(None)


def test_view_errors(emb):
    with pytest.raises(ConfigError, match="not among"):
        select_views(emb[:, :2], ("wide_view", "front"), ("side",))
    with pytest.raises(ConfigError, match="views"):
        score_embeddings(emb, embed_prompts(encoder, get_task().prompts()), 0.9, stored_views=("wide_view",))

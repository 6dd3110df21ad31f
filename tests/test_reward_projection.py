"""Goal-baseline projection against an independent NumPy reference (rmtl.reward.projection)."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.errors import ConfigError
from rmtl.reward.projection import goal_baseline_scores

D, K = 16, 3


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 4, D))  # [N, V, D], not normalised: the scorer normalises
    goals = np.stack([_unit(rng.normal(size=(2, D))).mean(0) for _ in range(K)])  # mean of unit vectors
    baseline = _unit(rng.normal(size=D))
    return x, goals, baseline


def reference(x, goals, baseline, alpha):
    """Literal VLM-RMs formula with an explicit D x D projection per goal."""
    xn = x / np.linalg.norm(x, axis=-1, keepdims=True)
    out = np.empty(x.shape[:-1] + (len(goals),))
    for i, g in enumerate(goals):
        d = g - baseline
        P = alpha * np.outer(d, d) / (d @ d) + (1 - alpha) * np.eye(len(d))
        diff = (xn - g) @ P
        out[..., i] = 1 - 0.5 * np.sum(diff**2, axis=-1)
    return out


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_matches_reference(data, alpha):
    x, g, b = data
    s = goal_baseline_scores(x, g, b, alpha)
    assert s.shape == (5, 4, K) and s.dtype == np.float32
    np.testing.assert_allclose(s, reference(x, g, b, alpha), atol=1e-5)


def test_alpha_zero_is_cosine_for_unit_goals(data):
    x, _, b = data
    rng = np.random.default_rng(1)
    g = _unit(rng.normal(size=(K, D)))
    s = goal_baseline_scores(x, g, b, 0.0)
    cos = _unit(x) @ g.T
    np.testing.assert_allclose(s, cos, atol=1e-5)  # 1 - 0.5||x-g||^2 = x.g for unit x, g


def test_alpha_one_depends_only_on_component_along_d(data):
    x, g, b = data
    xn = _unit(x[:, 0])
    s = goal_baseline_scores(xn, g, b, 1.0)
    rng = np.random.default_rng(2)
    for i in range(K):
        d = (g[i] - b) / np.linalg.norm(g[i] - b)
        noise = rng.normal(size=xn.shape)
        noise -= (noise @ d)[:, None] * d  # orthogonal to d
        moved = xn + 0.5 * noise
        # Keep unit norm while keeping the component along d fixed.
        along = (xn @ d)[:, None] * d
        perp = moved - along
        perp *= np.sqrt(1 - (xn @ d) ** 2)[:, None] / np.linalg.norm(perp, axis=-1, keepdims=True)
        s2 = goal_baseline_scores(along + perp, g, b, 1.0)
        np.testing.assert_allclose(s2[:, i], s[:, i], atol=1e-5)
        assert not np.allclose(goal_baseline_scores(along + perp, g, b, 0.5)[:, i], goal_baseline_scores(xn, g, b, 0.5)[:, i])


def test_errors(data):
    x, g, b = data
    with pytest.raises(ConfigError, match="alpha"):
        goal_baseline_scores(x, g, b, 1.5)
    with pytest.raises(ConfigError, match="sizes differ"):
        goal_baseline_scores(x[..., :8], g, b, 0.9)
    with pytest.raises(ConfigError, match="baseline"):
        goal_baseline_scores(x, np.stack([b, g[1], g[2]]), b, 0.9)
    goal_baseline_scores(x, np.stack([b, g[1], g[2]]), b, 0.0)  # cosine needs no direction

"""Goal-baseline projection (VLM-RMs; definition: docs/reward.md, "Scores").

For a unit image embedding x, goal g_i and baseline b (text embeddings), d_i = g_i - b,
P_i = alpha d_i d_i^T / ||d_i||^2 + (1 - alpha) I and s_i(x) = 1 - 0.5 ||(x - g_i) P_i||^2.

Since P_i is symmetric with eigenvalue 1 along d_i and (1 - alpha) across it, with
y = x - g_i and c = y . d_i / ||d_i||:

    ||y P_i||^2 = (1 - (1 - alpha)^2) c^2 + (1 - alpha)^2 ||y||^2

so all K micro-tasks need only two [.., D] x [D, K] products, never a D x D matrix.
"""

from __future__ import annotations

import numpy as np

from rmtl.errors import ConfigError

DEFAULT_ALPHA = 0.9
"""The projection's mix of goal-baseline projection and plain goal similarity (paper App. A):
the default of every command, flow and reward config that takes an ``alpha``."""
MIN_DIRECTION_NORM = 1e-8


def goal_baseline_scores(embeddings: np.ndarray, goals: np.ndarray, baseline: np.ndarray, alpha: float) -> np.ndarray:
    """Scores s_i(x) for every goal: embeddings [..., D], goals [K, D], baseline [D] -> float32 [..., K].

    Image embeddings are (re)normalised here, so stored float16 vectors can be passed as
    they are; goals and baseline are used as given (means of unit vectors).
    """
    if not 0.0 <= float(alpha) <= 1.0:
        raise ConfigError(f"alpha must be in [0, 1], got {alpha}")
    x = np.asarray(embeddings, dtype=np.float64)
    g = np.atleast_2d(np.asarray(goals, dtype=np.float64))
    b = np.asarray(baseline, dtype=np.float64).reshape(-1)
    if x.shape[-1] != g.shape[-1] or b.shape[0] != g.shape[-1]:
        raise ConfigError(
            f"embedding sizes differ: images {x.shape[-1]}, goals {g.shape[-1]}, baseline {b.shape[0]}; "
            "were the text embeddings made with the same model as the image embeddings?"
        )
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    x = x / np.maximum(norms, 1e-12)
    d = g - b
    d_norm = np.linalg.norm(d, axis=-1)
    one_minus = 1.0 - float(alpha)
    if alpha > 0 and np.any(d_norm < MIN_DIRECTION_NORM):
        raise ConfigError("a goal prompt embeds to the baseline (d = g - b = 0); use a goal text that differs from the baseline")
    d_hat = d / np.maximum(d_norm, MIN_DIRECTION_NORM)[:, None]
    xg = x @ g.T  # [..., K]
    gg = np.einsum("kd,kd->k", g, g)
    c = x @ d_hat.T - np.einsum("kd,kd->k", g, d_hat)  # (x - g_k) . d_hat_k
    y2 = 1.0 - 2.0 * xg + gg  # ||x - g_k||^2 with ||x|| = 1
    proj2 = (1.0 - one_minus**2) * c**2 + one_minus**2 * y2
    return (1.0 - 0.5 * proj2).astype(np.float32)

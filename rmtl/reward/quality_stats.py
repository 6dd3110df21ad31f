"""Task-independent statistics of reward scores that the reward-quality metrics are made of:
rank separation (ROC AUC), rank correlation (Spearman), spread (p5-p95) and step-to-step variation."""

from __future__ import annotations

import numpy as np


def roc_auc(positive: np.ndarray, negative: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties count half)."""
    if len(positive) == 0 or len(negative) == 0:
        return float("nan")
    from scipy.stats import rankdata  # lazy: scipy.stats takes most of a second to import

    ranks = rankdata(np.concatenate([positive, negative]))
    u = ranks[: len(positive)].sum() - len(positive) * (len(positive) + 1) / 2
    return float(u / (len(positive) * len(negative)))


def spread(x: np.ndarray) -> float:
    """p95 - p5 of a score sample (0 when empty)."""
    return float(np.percentile(x, 95) - np.percentile(x, 5)) if len(x) else 0.0


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation; NaN for fewer than 3 samples or a constant side."""
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def step_variation(active_scores: np.ndarray, episode: np.ndarray, step: np.ndarray, phase: np.ndarray) -> float:
    """Mean |s_t - s_{t-1}| of the active-phase score along episodes, over steps where the
    rule phase did not change (a phase switch changes the prompt, not the noise)."""
    order = np.lexsort((step, episode))
    s, e, p = active_scores[order], episode[order], phase[order]
    same = (e[1:] == e[:-1]) & (p[1:] == p[:-1])
    d = np.abs(np.diff(s))[same]
    return float(d.mean()) if len(d) else float("nan")

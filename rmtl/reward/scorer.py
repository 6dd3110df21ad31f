"""Phased multi-view scores from image embeddings: per view [N, V, K] and the view mean [N, K].

Everything here is a function of embeddings, text embeddings and alpha, so stored
embeddings can be re-scored for any prompt set or alpha without rendering again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from collections.abc import Sequence

import numpy as np

from rmtl.errors import ConfigError
from rmtl.reward.projection import goal_baseline_scores
from rmtl.reward.prompts import PromptConfig, TextEmbeddings, TextEncoder, embed_prompts


class ScorerSettings(Protocol):
    """What a scorer is built from: a resolved VLM reward config (rmtl.reward.kinds.vlm.RewardConfig;
    a protocol, so that the scorer stays below the kinds that use it)."""

    @property
    def prompts(self) -> PromptConfig: ...
    @property
    def single_prompt(self) -> bool: ...
    @property
    def alpha(self) -> float: ...
    @property
    def active_views(self) -> tuple[str, ...]: ...


def select_views(embeddings: np.ndarray, stored_views: Sequence[str], views: Sequence[str]) -> np.ndarray:
    """The ``views`` columns of embeddings [N, V_stored, D] whose view axis is ``stored_views``."""
    stored = list(stored_views)
    missing = [v for v in views if v not in stored]
    if missing:
        raise ConfigError(f"view {missing[0]!r} is not among the embedded views {stored}")
    if embeddings.shape[1] != len(stored):
        raise ConfigError(f"embeddings have {embeddings.shape[1]} views but {len(stored)} view names were given")
    idx = [stored.index(v) for v in views]
    return embeddings if idx == list(range(len(stored))) else embeddings[:, idx]


@dataclass(frozen=True)
class Scores:
    """Per-view scores [N, V, K] and their mean over the views [N, K]."""

    per_view: np.ndarray
    aggregate: np.ndarray

    def active(self, phases: np.ndarray | None = None) -> np.ndarray:
        """Aggregate score of each row's active phase: [N].

        One goal (single prompt) means no phases: its score is active whatever ``phases``
        says, so a phase selector cannot change a single-prompt reward.
        """
        if self.aggregate.shape[-1] == 1:
            return self.aggregate[:, 0]
        if phases is None:
            raise ConfigError(f"scores of {self.aggregate.shape[-1]} goals need the active phase of every row")
        p = np.asarray(phases, dtype=np.int64)
        return self.aggregate[np.arange(len(p)), p]


def score_embeddings(
    embeddings: np.ndarray,
    text: TextEmbeddings,
    alpha: float,
    views: Sequence[str] | None = None,
    stored_views: Sequence[str] | None = None,
) -> Scores:
    """Score embeddings [N, V, D] for every phase; the mean runs over exactly ``views``.

    ``stored_views`` names the view axis of ``embeddings`` (default: ``views``); ``views``
    picks and orders the views to score (default: all stored).
    """
    emb = np.asarray(embeddings)
    if emb.ndim != 3:
        raise ConfigError(f"embeddings must be [N, V, D], got shape {emb.shape}")
    if views is not None:
        emb = select_views(emb, tuple(stored_views) if stored_views is not None else tuple(views), views)
    elif stored_views is not None and emb.shape[1] != len(stored_views):
        raise ConfigError(f"embeddings have {emb.shape[1]} views but {len(stored_views)} view names were given")
    per_view = goal_baseline_scores(emb, text.goals, text.baseline, alpha)
    return Scores(per_view, per_view.mean(axis=1))


class PhasedScorer:
    """Fixed text embeddings, alpha and views: embeddings [N, V, D] -> :class:`Scores`."""

    def __init__(self, text: TextEmbeddings, alpha: float, views: Sequence[str]):
        if not 0.0 <= alpha <= 1.0:
            raise ConfigError(f"alpha must be in [0, 1], got {alpha}")
        self.text = text
        self.alpha = float(alpha)
        self.views = tuple(views)
        if not self.views or len(set(self.views)) != len(self.views):
            raise ConfigError(f"a scorer needs distinct view names, got {list(self.views)}")

    @classmethod
    def from_config(cls, config: ScorerSettings, encode_text: TextEncoder) -> PhasedScorer:
        """Embed the configured prompts (one text-encoder call) for the configured variant."""
        text = embed_prompts(encode_text, config.prompts, config.single_prompt)
        return cls(text, config.alpha, config.active_views)

    @property
    def num_phases(self) -> int:
        return int(self.text.goals.shape[0])

    def __call__(self, embeddings: np.ndarray, stored_views: Sequence[str] | None = None) -> Scores:
        """Score embeddings whose view axis is ``stored_views`` (default: this scorer's views)."""
        return score_embeddings(embeddings, self.text, self.alpha, self.views, stored_views or self.views)

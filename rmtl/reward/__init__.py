"""Phased multi-view VLM reward: prompts, goal-baseline projection, phase selection, shaping.

Scores are a pure function of image embeddings, text embeddings and alpha
(:func:`score_embeddings`), so stored embeddings can be re-scored offline;
:class:`RewardVecEnv` pays the reward of any kind (:mod:`rmtl.reward.kinds`), the VLM's live
through an :class:`EmbeddingSource`. Training assembles them into one env stack
(:func:`rmtl.train.envs.train_env.build_train_env`; ``docs/reward.md``, "One step, file by file").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmtl.lazy import lazy_attributes

if TYPE_CHECKING:  # the same names, for type checkers and IDEs (at run time: _LAZY)
    from rmtl.reward.kinds.vlm import RewardConfig
    from rmtl.reward.phase import ExternalPhaseSelector, PhaseSelector, RulePhaseSelector
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.reward.prompts import PromptConfig, TextEmbeddings, embed_prompts
    from rmtl.reward.scorer import PhasedScorer, Scores, score_embeddings, select_views
    from rmtl.reward.shaping import RewardShaper, ShapingConfig, ShapingOutput
    from rmtl.reward.source import EmbeddingSource, FrameRenderer, VLMEmbeddingSource
    from rmtl.reward.vec_env import REWARD_INFO, RewardVecEnv
    from rmtl.reward.terminal_frames import TerminalFrames

_LAZY = {
    "RewardConfig": "rmtl.reward.kinds.vlm",
    "ExternalPhaseSelector": "rmtl.reward.phase",
    "PhaseSelector": "rmtl.reward.phase",
    "RulePhaseSelector": "rmtl.reward.phase",
    "goal_baseline_scores": "rmtl.reward.projection",
    "PromptConfig": "rmtl.reward.prompts",
    "TextEmbeddings": "rmtl.reward.prompts",
    "embed_prompts": "rmtl.reward.prompts",
    "PhasedScorer": "rmtl.reward.scorer",
    "Scores": "rmtl.reward.scorer",
    "score_embeddings": "rmtl.reward.scorer",
    "select_views": "rmtl.reward.scorer",
    "RewardShaper": "rmtl.reward.shaping",
    "ShapingConfig": "rmtl.reward.shaping",
    "ShapingOutput": "rmtl.reward.shaping",
    "EmbeddingSource": "rmtl.reward.source",
    "FrameRenderer": "rmtl.reward.source",
    "VLMEmbeddingSource": "rmtl.reward.source",
    "REWARD_INFO": "rmtl.reward.vec_env",
    "RewardVecEnv": "rmtl.reward.vec_env",
    "TerminalFrames": "rmtl.reward.terminal_frames",
}
"""Public names and their modules: imported on first use (torch, open_clip and SB3 load only when needed)."""

__all__ = [
    "RewardConfig",
    "ExternalPhaseSelector", "PhaseSelector", "RulePhaseSelector",
    "goal_baseline_scores",
    "PromptConfig", "TextEmbeddings", "embed_prompts",
    "PhasedScorer", "Scores", "score_embeddings", "select_views",
    "RewardShaper", "ShapingConfig", "ShapingOutput",
    "EmbeddingSource", "FrameRenderer", "VLMEmbeddingSource",
    "REWARD_INFO", "RewardVecEnv", "TerminalFrames",
]

__getattr__ = lazy_attributes(__name__, _LAZY)

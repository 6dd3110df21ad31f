"""Phased multi-view VLM reward: prompts, goal-baseline projection, phase selection, shaping.

Scores are a pure function of image embeddings, text embeddings and alpha
(:func:`score_embeddings`), so stored embeddings can be re-scored offline;
:class:`RewardVecEnv` pays the reward of any kind (:mod:`rmtl.reward.kinds`), the VLM's live
through an :class:`EmbeddingSource`.
"""

from __future__ import annotations

from rmtl.reward.config import RewardConfig
from rmtl.reward.phase import ExternalPhaseSelector, PhaseSelector, RulePhaseSelector
from rmtl.reward.projection import goal_baseline_scores
from rmtl.reward.prompts import PromptConfig, TextEmbeddings, embed_prompts
from rmtl.reward.scorer import PhasedScorer, Scores, score_embeddings, select_views
from rmtl.reward.shaping import RewardShaper, ShapingConfig, ShapingOutput
from rmtl.reward.source import EmbeddingSource, FrameRenderer, VLMEmbeddingSource
from rmtl.reward.vec_env import REWARD_INFO, RewardVecEnv
from rmtl.reward.wrapper import TerminalFrames, make_reward_vec_env, vlm_reward_env

__all__ = [
    "RewardConfig",
    "ExternalPhaseSelector", "PhaseSelector", "RulePhaseSelector",
    "goal_baseline_scores",
    "PromptConfig", "TextEmbeddings", "embed_prompts",
    "PhasedScorer", "Scores", "score_embeddings", "select_views",
    "RewardShaper", "ShapingConfig", "ShapingOutput",
    "EmbeddingSource", "FrameRenderer", "VLMEmbeddingSource",
    "REWARD_INFO", "RewardVecEnv", "TerminalFrames", "make_reward_vec_env", "vlm_reward_env",
]

"""The phased multi-view VLM reward: render the reward views, embed them, score every
micro-task's prompt per view, average over the views, shape the active micro-task's score."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rmtl.errors import ConfigError
from rmtl.reward.kinds import register_kind
from rmtl.reward.kinds.base import KindStep, RewardKind, shaped_terms
from rmtl.reward.scorer import PhasedScorer
from rmtl.reward.shaping import RewardShaper
from rmtl.env.cameras import MAX_RESOLUTION, MIN_RESOLUTION
from rmtl.reward.config import RewardConfig
from rmtl.reward.source import EmbeddingSource, VLMEmbeddingSource

if TYPE_CHECKING:  # annotations only: the model module imports open_clip and torch
    from rmtl.vlm.model import VLM


def _resolution(config: RewardConfig, vlm: VLM | None, source: Any) -> int:
    if config.resolution is not None:
        return config.resolution
    size = vlm.image_size if vlm is not None else getattr(source, "image_size", None)
    if size is None:
        raise ConfigError("set RewardConfig.resolution: no VLM is loaded to take the input size from")
    return int(min(max(size, MIN_RESOLUTION), MAX_RESOLUTION))


@register_kind("vlm", config=RewardConfig)
class VLMKind(RewardKind):
    """Scores from pixels through ``source`` (render-and-embed, or a state cache) and ``scorer``.

    ``band_phases``: shape a one-goal score inside the rule's band of that many micro-tasks
    (the single-prompt-in-band control, which leaks the rule; 0: no band for one goal).
    """

    needs_frames = True
    progress_source = "scores"

    def __init__(self, source: EmbeddingSource, scorer: PhasedScorer, views: tuple[str, ...], resolution: int,
                 add_env_reward: bool = True, band_phases: int = 0):
        self.source, self.scorer = source, scorer
        self.views, self.resolution = tuple(views), int(resolution)
        self.add_env_reward = add_env_reward
        if band_phases and scorer.num_phases != 1:
            raise ConfigError("the single-prompt band control needs a single-prompt scorer (reward.single_prompt)")
        self.num_phases = int(band_phases) if band_phases else scorer.num_phases

    @classmethod
    def from_run(cls, run, task, *, reward: RewardConfig, vlm=None, source=None) -> "VLMKind":
        return cls.from_config(reward, vlm=vlm, source=source,
                               band_phases=len(task.micro_tasks.names) if reward.single_prompt_band else 0)

    @classmethod
    def from_config(cls, config: RewardConfig, *, vlm: VLM | None = None, source: EmbeddingSource | None = None,
                    scorer: PhasedScorer | None = None, band_phases: int = 0) -> "VLMKind":
        """The kind of a :class:`RewardConfig` (with ``single_prompt_band``: inside the band of
        ``band_phases`` micro-tasks, default the prompt set's): ``vlm`` is loaded from ``config.model`` only when needed
        (no ``source`` or no ``scorer``); ``source`` replaces render-and-embed (e.g. the state cache);
        ``scorer`` brings precomputed text embeddings."""
        if vlm is None and (source is None or scorer is None):
            from rmtl.vlm.loader import load_vlm

            vlm = load_vlm(config.model, config.device, config.precision, compile=config.compile)
        views = config.active_views
        source = source if source is not None else VLMEmbeddingSource(vlm, config.batch_size)
        scorer = scorer if scorer is not None else PhasedScorer.from_config(config, vlm.encode_text)
        if tuple(scorer.views) != views:
            raise ConfigError(f"scorer views {scorer.views} differ from the configured views {views}")
        if config.single_prompt_band and not band_phases:
            band_phases = len(config.prompts.goal_names)
        return cls(source, scorer, views, _resolution(config, vlm, source), config.add_env_reward, band_phases)

    def bind(self, venv: Any) -> None:
        from rmtl.reward.terminal_frames import TerminalFrames

        if not all(venv.env_is_wrapped(TerminalFrames)):
            raise ConfigError(
                "every sub-env must be wrapped in rmtl.reward.TerminalFrames so episode ends are scored before "
                "the auto-reset; build the vec env with rmtl.reward.make_reward_vec_env or wrap each env yourself")
        venv.env_method("set_reward_render", self.views, self.resolution)

    def step(self, states: np.ndarray, phases: np.ndarray, shaper: RewardShaper, render) -> KindStep:
        n = states.shape[0]
        embeddings = np.asarray(self.source(states, render))
        if embeddings.ndim != 3 or embeddings.shape[:2] != (n, len(self.views)):
            raise ConfigError(f"embedding source returned shape {embeddings.shape}; "
                              f"expected [{n}, {len(self.views)}, D] for views {self.views}")
        scores = self.scorer(embeddings)
        active = scores.active(phases)
        out = shaper(active, phases)
        terms = shaped_terms(out, active)
        terms["scores"] = scores.aggregate.astype(np.float32)
        terms["scores_per_view"] = scores.per_view.astype(np.float32)
        return KindStep(out.reward, terms)

"""The phased multi-view VLM reward: render the reward views, embed them, score every
micro-task's prompt per view, average over the views, shape the active micro-task's score.
Its config (:class:`RewardConfig`, paper Table 1 defaults) is here with it; importing this module
loads no torch or open_clip (the model is loaded by the caller)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal
from collections.abc import Sequence

import numpy as np
from pydantic import Field, field_validator, model_validator

from rmtl.env.cameras import MAX_RESOLUTION, MIN_RESOLUTION, Resolution, ViewNames, resolve_views
from rmtl.errors import ConfigError, RmtlError
from rmtl.micro_tasks import MicroTaskSpec
from rmtl.reward.config import RewardKindConfig
from rmtl.reward.kinds import register_kind
from rmtl.reward.kinds.base import KindStep, RewardKind, RunFacts, shaped_terms
from rmtl.reward.prompts import PromptConfig
from rmtl.reward.scorer import PhasedScorer
from rmtl.reward.shaping import RewardShaper, ShapingConfig
from rmtl.reward.source import EmbeddingSource, VLMEmbeddingSource
from rmtl.vlm.spec import PRECISIONS, parse_spec
from rmtl.reward.projection import DEFAULT_ALPHA

if TYPE_CHECKING:  # annotations only: the model module imports open_clip and torch
    from rmtl.vlm.model import VLM


class RewardConfig(RewardKindConfig):
    """Scorer model, projection, views, prompts, variants and shaping of the VLM reward."""

    kind: Literal["vlm"] = "vlm"
    model: str = "PE-Core-bigG-14-448:meta"
    """Model spec (rmtl.vlm.spec): NAME:TAG, hf-hub:ORG/REPO, a local directory, ARCH:WEIGHTS or ARCH@random."""
    device: str | None = None
    """Torch device; None: CUDA when present, else CPU."""
    precision: str | None = None
    """fp32, amp_bf16, bf16, fp16 or amp; None: amp_bf16 on CUDA, bf16 on a CPU with native bf16, else fp32."""
    alpha: float = Field(DEFAULT_ALPHA, ge=0, le=1)
    """Projection mix: 0 is cosine similarity, 1 projects onto the goal-baseline direction only."""
    views: ViewNames | None = None
    """Camera views averaged into the score, names of the task's camera bank (None: all of them;
    :meth:`for_task` puts them in bank order)."""
    single_view: bool = False
    """Single-view ablation: score the bank's first view alone (pick-and-lift: wide_view), whatever
    views says."""
    resolution: Resolution | None = None
    """Render resolution (px); None: the model's input size."""
    batch_size: int = Field(64, ge=1)
    """Images per model call."""
    compile: bool = False
    """Run the image tower through ``torch.compile`` (inductor: a C++ compiler on CPU; a few
    seconds of compilation per process). Same weights and model id, scores equal to the
    compute precision's rounding; on CPU it embeds the 64 px ``rmtl-fetch-fast`` in ~0.75x
    the time (docs/stage1.md)."""
    prompts: PromptConfig = PromptConfig()
    """Baseline, micro-task goals and single goal; what is unset is the task's own
    (:meth:`for_task` fills it in, and a reward scores only filled-in prompts)."""
    single_prompt: bool = False
    """Single-prompt baseline: the global goal prompt as the only goal (one phase, no phase index)."""
    single_prompt_band: bool = False
    """With single_prompt: shape its score inside the rule's band of the micro-tasks, (k + u)/K - 1.
    A control that leaks the rule's phase into the reward, never a baseline."""
    shaping: ShapingConfig = ShapingConfig()
    add_env_reward: bool = True
    """Add the environment's own reward (the +1 success bonus) to the shaped reward."""

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        try:
            parse_spec(v)
        except RmtlError as err:
            raise ValueError(str(err)) from None
        return v

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: str | None) -> str | None:
        if v is not None and v not in PRECISIONS:
            raise ValueError(f"choose from {', '.join(PRECISIONS)}")
        return v

    @model_validator(mode="after")
    def _band(self) -> RewardConfig:
        if self.single_prompt_band and not self.single_prompt:
            raise ValueError("single_prompt_band needs single_prompt: true (a micro-task reward has the band already)")
        return self

    def for_task(self, micro_tasks: MicroTaskSpec, camera_views: Sequence[str]) -> RewardConfig:
        """This config resolved against a task (``task.reward_config(config)`` calls it): prompts
        against its micro-tasks (:meth:`PromptConfig.for_micro_tasks`), views against its camera
        bank's names (bank order; the first alone with single_view). The config a reward of that
        task scores with; resolving it again changes nothing."""
        bank = tuple(camera_views)
        views = bank[:1] if self.single_view else resolve_views(self.views, bank)
        return self.replace(prompts=PromptConfig.for_micro_tasks(micro_tasks, self.prompts), views=views)

    @property
    def active_views(self) -> tuple[str, ...]:
        """The views actually rendered and averaged (of a resolved config, :meth:`for_task`)."""
        if self.views is None or (self.single_view and len(self.views) != 1):
            raise ConfigError("this reward config leaves its views to the task; resolve it against the task first "
                              "(task.reward_config(config))")
        return self.views


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
    def build(cls, reward: RewardConfig, task, facts: RunFacts, *, vlm=None, source=None) -> VLMKind:
        return cls.from_config(reward, vlm=vlm, source=source,
                               band_phases=len(task.micro_tasks.names) if reward.single_prompt_band else 0)

    @classmethod
    def from_config(cls, config: RewardConfig, *, vlm: VLM | None = None, source: EmbeddingSource | None = None,
                    scorer: PhasedScorer | None = None, band_phases: int = 0) -> VLMKind:
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
                "the auto-reset; build the env stack with rmtl.train.envs.train_env.build_train_env, or wrap each env "
                "yourself")
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

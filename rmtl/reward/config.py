"""The configs of the reward kinds: their base, tagged by ``kind``, and the phased multi-view
VLM reward's (paper Table 1 defaults). The other kinds' configs live beside their kinds
(rmtl.reward.kinds)."""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field, field_validator, model_validator

from rmtl.config import Config
from rmtl.env.cameras import Resolution, ViewNames, resolve_views
from rmtl.errors import ConfigError, RmtlError
from rmtl.micro_tasks import MicroTaskSpec
from rmtl.reward.prompts import PromptConfig
from rmtl.reward.shaping import ShapingConfig
from rmtl.vlm.spec import PRECISIONS, parse_spec


class RewardKindConfig(Config):
    """Base of each reward kind's config. ``kind`` names the registered kind (rmtl.reward.kinds)
    and picks the config class when a run config is read, so each kind holds only its own fields."""

    kind: str

    def shaping_config(self) -> ShapingConfig:
        """The shaping of this kind's reward; a kind without shaping (the dense reference) gets the
        default, which its shaper never applies."""
        shaping = getattr(self, "shaping", None)
        return shaping if isinstance(shaping, ShapingConfig) else ShapingConfig()


class RewardConfig(RewardKindConfig):
    """Scorer model, projection, views, prompts, variants and shaping of the VLM reward."""

    kind: Literal["vlm"] = "vlm"
    model: str = "PE-Core-bigG-14-448:meta"
    """Model spec (rmtl.vlm.spec): NAME:TAG, hf-hub:ORG/REPO, a local directory, ARCH:WEIGHTS or ARCH@random."""
    device: str | None = None
    """Torch device; None: CUDA when present, else CPU."""
    precision: str | None = None
    """fp32, amp_bf16, bf16, fp16 or amp; None: amp_bf16 on CUDA, bf16 on a CPU with native bf16, else fp32."""
    alpha: float = Field(0.9, ge=0, le=1)
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
    def _band(self) -> "RewardConfig":
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

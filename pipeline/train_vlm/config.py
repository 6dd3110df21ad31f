"""The hyperparameters of domain-CLIP training. Nothing heavy is imported here, so a bad
option fails before torch and OpenCLIP load."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rmtl.config import Config
from rmtl.tasks import get_task

_CAPTIONS = get_task().caption_options
"""The task's caption recipe: the defaults of the caption options below."""


class TrainVLMConfig(Config):
    """Hyperparameters of domain-CLIP training."""

    model: str = "rmtl-fetch-tiny"
    """Registered OpenCLIP architecture to train from random weights."""
    steps: int = Field(3000, ge=1)
    """Optimiser steps."""
    batch_size: int = Field(256, ge=2)
    """(image, caption) pairs per step; each pair is one view of one state."""
    lr: float = Field(1e-3, gt=0)
    """Peak AdamW learning rate (cosine decay after warm-up)."""
    weight_decay: float = Field(0.1, ge=0)
    """AdamW weight decay (not applied to biases, norms, embeddings or the logit scale)."""
    warmup_steps: int = Field(200, ge=0)
    """Linear warm-up steps."""
    soft_sigma: float = Field(0.03, ge=0)
    """Width (m) of the soft-target kernel on task geometry; 0 gives plain CLIP targets."""
    soft_sigma_wide: float = Field(0.0, ge=0)
    """Width (m) of a second, wider kernel averaged 50/50 with the first (0: off); it
    keeps the score graded over centimetres-to-decimetres, not only near each situation."""
    graded_approach_rate: float = Field(_CAPTIONS["graded_rates"][0], ge=0, le=0.5)
    """Peak probability of progress-graded approach-prompt captions (rmtl.tasks.fetch_lift.captions); 0: off."""
    graded_align_rate: float = Field(_CAPTIONS["graded_rates"][1], ge=0, le=0.5)
    """Peak probability of progress-graded align-prompt captions; 0: off."""
    graded_approach_scale: float = Field(_CAPTIONS["graded_scales"][0], gt=0)
    """Distance (m) over which the graded approach-caption probability falls by a factor e."""
    graded_align_scale: float = Field(_CAPTIONS["graded_scales"][1], gt=0)
    """Distance (m) over which the graded align-caption probability falls by a factor e."""
    graded_band: Literal["wide", "full", "phase"] = _CAPTIONS["graded_band"]
    """Which states graded prompts may caption (rmtl.tasks.fetch_lift.captions.GRADED_BANDS)."""
    target_prompt_rate: float | None = Field(_CAPTIONS["target_prompt_rate"], ge=0, le=1)
    """Probability that a micro-task's target state is captioned with the paper prompt
    rather than another paraphrase of its situation (None: uniform over paraphrases)."""
    captions: Literal["graded", "neutral", "compositional", "compositional_lift", "compositional_graded_lift"] = "graded"
    """'graded': the shipped recipe (paper prompts among the captions). 'neutral': the
    prompt-neutral stand-in, whose training never sees an evaluated prompt text (captions
    from rmtl.tasks.fetch_lift.captions' neutral mode); 'compositional': prompt-neutral as well, with
    rich compositional captions (rmtl.tasks.fetch_lift.neutral_captions); 'compositional_lift': compositional,
    with the cube's height always stated at the gripper and no near paraphrase of a prompt; 'compositional_graded_lift':
    as compositional_lift, the height graded by degree (resting, just raised, a few centimetres, high). All of them need baseline_balance 0 and a
    select_by other than gate_margin (both use the evaluated prompts), and reset_text_tower when starting from ``init``."""
    reset_text_tower: bool = False
    """Re-initialise the text tower and logit scale to random weights (seed ``seed``) before
    training, keeping ``init``'s image tower: a text tower that never saw the prompts."""
    baseline_balance: float = Field(10.0, ge=0)
    """Weight of a penalty on the spread of the paper micro-task prompts' cosine to the
    baseline prompt (0: off). Under the goal-baseline projection a prompt close to the
    baseline gets a head start on every image (:func:`baseline_balance_penalty`), so
    without it the broadest prompt wins on states another prompt describes."""
    init: str | None = None
    """Model spec to start from (e.g. a trained directory) instead of random weights."""
    tune: Literal["all", "text"] = "all"
    """'all': train both towers. 'text': lock the image tower (LiT-style, needs ``init``)
    and train the text tower and logit scale on image embeddings computed once, read from
    the stores when they hold embeddings of ``init``. Cheap on a CPU, and enough when the
    image embeddings already order states by progress and only the prompts sit wrong."""
    holdout_fraction: float = Field(0.15, ge=0, lt=1)
    """Fraction of episodes held out for evaluation (chosen by episode id)."""
    shift_augment: int = Field(4, ge=0)
    """Random translation (px) applied to training images."""
    seed: int = Field(0, ge=0)
    """Seed of sampling, captions and initialisation."""
    eval_every: int = Field(500, ge=1)
    """Steps between held-out evaluations."""
    checkpoint_every: int = Field(500, ge=1)
    """Steps between resumable checkpoints."""
    device: str | None = None
    """'cuda', 'cpu' or None for the best available."""
    bf16_autocast: bool | None = None
    """Run forward passes under bf16 autocast (weights and optimiser stay fp32). None: on
    CUDA and on CPUs with native bf16 (1.3x the fp32 training speed of the image tower on
    a 2-core AVX512-BF16 CPU, results/bench/amd_epyc/image_tower_training.json)."""
    select_by: Literal["gate_margin", "caption_loss", "last"] = "gate_margin"
    """Which weights to ship. 'gate_margin': the held-out evaluation with the best worst-gate ratio
    under the paper prompts (:func:`gate_margin`); 'caption_loss': the lowest soft contrastive loss
    of the training objective on held-out episodes of every family (no prompt text: allowed for
    prompt-neutral captions); 'last': the last step's."""
    patience_evals: int | None = Field(None, ge=1)
    """Stop when the selection objective has not improved for this many evaluations (None: run
    the whole budget)."""
    caption_eval_samples: int = Field(2048, ge=2)
    """Held-out (row, view) samples, each with one caption, drawn once, that the held-out caption
    loss averages over (in batches of ``batch_size``, as training sees them)."""
    frame_cache_gb: float = Field(2.0, gt=0)
    """Training frames in memory at most (GiB) when they are streamed from stores
    (``stream_frames``): a shuffle buffer of row blocks (pipeline.stores.frame_stream)."""
    stream_frames: bool = True
    """Read training frames from the stores through the bounded buffer instead of loading
    every frame (the frames of in-memory renders are always in memory)."""
    caption_bank: int = Field(8, ge=1)
    """Captions per training state written and embedded once, before training, when the model's
    text tower is frozen (a packaged pretrained encoder, rmtl.vlm.registry.packaged_text_tower):
    each step then draws one of them per sample instead of running the text tower. Each state's
    j-th caption is written with the j-th of ``caption_bank`` fixed seeds, so states the captions
    cannot tell apart share their captions and each distinct caption is embedded once."""
    time_budget_s: float | None = Field(None, gt=0)
    """Optional wall-clock budget: the cosine schedule runs on max(step/steps,
    elapsed/budget) and training stops when either reaches 1."""

    @model_validator(mode="after")
    def _locked_image_tower_needs_init(self) -> TrainVLMConfig:
        if self.tune == "text" and self.init is None:
            raise ValueError("tune='text' locks the image tower, so it needs trained weights: set init (e.g. init=rmtl-fetch-tiny)")
        if self.reset_text_tower and self.init is None:
            raise ValueError("reset_text_tower keeps init's image tower: set init (without init every tower starts random)")
        if self.captions != "graded":
            leaks = [name for name, bad in (("baseline_balance > 0", self.baseline_balance > 0),
                                            ("select_by gate_margin", self.select_by == "gate_margin"),
                                            ("init without reset_text_tower", self.init is not None and not self.reset_text_tower))
                     if bad]
            if leaks:
                raise ValueError(f"captions={self.captions!r} must not train on or select by the evaluated prompts: "
                                 f"{', '.join(leaks)} would (set baseline_balance 0, select_by caption_loss or last, reset_text_tower true)")
        if self.patience_evals is not None and self.select_by == "last":
            raise ValueError("patience_evals stops on a selection objective: set select_by gate_margin or caption_loss")
        return self

    def caption_options(self) -> dict[str, Any]:
        """The keywords of the task's caption sampler (``Task.captions``) this config sets."""
        return {"graded_rates": (self.graded_approach_rate, self.graded_align_rate),
                "graded_scales": (self.graded_approach_scale, self.graded_align_scale),
                "graded_band": self.graded_band, "target_prompt_rate": self.target_prompt_rate,
                "mode": self.captions}

"""Train a small domain CLIP on rendered Fetch frames with captions written from state.

Contrastive training (OpenCLIP's symmetric InfoNCE) with *soft targets*: two samples
whose task geometry (gripper-to-cube offset, finger opening, cube lift) is close count
as partial positives, weighted by a Gaussian kernel of width ``soft_sigma`` metres. This
makes image embeddings a smooth function of task progress, so a prompt's score grows
steadily as the state approaches what it describes (what a dense reward needs), instead
of being flat within each captioned situation.

Whole episodes are held out; the reward-quality metrics (rmtl.tasks.fetch_lift.quality) are computed
on held-out expert episodes at step 0 (the random-weight model of the same architecture)
and every ``eval_every`` steps, with the training objective's loss on held-out episodes of every
family (the prompt-free selection objective, ``select_by caption_loss``). Output directory (loadable as a model spec):

    open_clip_config.json        architecture + preprocessing (OpenCLIP's format)
    open_clip_model.safetensors  weights (float16)
    metrics.json, train_log.csv, model_card.md, run.json
    checkpoint.pt                resume state (not shipped)

Modules: config (the options), data (rows and the three frame sources), objective (losses and
schedule), captions (the text side and the caption bank), heldout (held-out metrics: ``evaluate``, ``gate_margin``), selection
(what picks the kept weights: ``select_by``, early stopping), loop (the training loop), export (weights, renderer.json, model card), cli.
Public names load on first use, so importing the package (or its config) loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmtl.lazy import lazy_attributes

if TYPE_CHECKING:  # the same names, for type checkers and IDEs (at run time: _LAZY)
    from pipeline.train_vlm.config import TrainVLMConfig
    from pipeline.train_vlm.data import HOLDOUT_SALT, RowFrames, TrainingData, FrameSource, encode_rows
    from pipeline.train_vlm.objective import baseline_balance_penalty, soft_targets, task_geometry
    from pipeline.train_vlm.captions import caption_bank, text_tower_frozen
    from pipeline.train_vlm.heldout import evaluate, gate_margin
    from pipeline.train_vlm.selection import HeldOutCaptions, Selection
    from pipeline.train_vlm.loop import train_reward_vlm, reset_text_tower, load_checkpoint
    from pipeline.train_vlm.export import save_model, write_model_card, invoking_command
    from pipeline.train_vlm.cli import train_from_options, main

_LAZY = {
    "TrainVLMConfig": "pipeline.train_vlm.config",
    "HOLDOUT_SALT": "pipeline.train_vlm.data",
    "RowFrames": "pipeline.train_vlm.data",
    "TrainingData": "pipeline.train_vlm.data",
    "FrameSource": "pipeline.train_vlm.data",
    "encode_rows": "pipeline.train_vlm.data",
    "baseline_balance_penalty": "pipeline.train_vlm.objective",
    "soft_targets": "pipeline.train_vlm.objective",
    "task_geometry": "pipeline.train_vlm.objective",
    "caption_bank": "pipeline.train_vlm.captions",
    "text_tower_frozen": "pipeline.train_vlm.captions",
    "evaluate": "pipeline.train_vlm.heldout",
    "gate_margin": "pipeline.train_vlm.heldout",
    "HeldOutCaptions": "pipeline.train_vlm.selection",
    "Selection": "pipeline.train_vlm.selection",
    "train_reward_vlm": "pipeline.train_vlm.loop",
    "reset_text_tower": "pipeline.train_vlm.loop",
    "load_checkpoint": "pipeline.train_vlm.loop",
    "save_model": "pipeline.train_vlm.export",
    "write_model_card": "pipeline.train_vlm.export",
    "invoking_command": "pipeline.train_vlm.export",
    "train_from_options": "pipeline.train_vlm.cli",
    "main": "pipeline.train_vlm.cli",
}
"""Public names and their modules: imported on first use."""

__all__ = [
    "TrainVLMConfig", "HOLDOUT_SALT", "RowFrames", "TrainingData", "FrameSource", "encode_rows",
    "baseline_balance_penalty", "soft_targets", "task_geometry", "caption_bank", "text_tower_frozen",
    "evaluate", "gate_margin", "HeldOutCaptions", "Selection", "train_reward_vlm", "reset_text_tower",
    "load_checkpoint", "save_model", "write_model_card", "invoking_command", "train_from_options", "main",
]

__getattr__ = lazy_attributes(__name__, _LAZY)

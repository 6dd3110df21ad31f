"""What picks the weights a run keeps: the held-out caption loss (prompt-free) or the gate margin
(paper prompts) of each evaluation, the best weights so far, and the patience of early stopping."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
import torch

from pipeline.train_vlm.data import TrainingData
from pipeline.train_vlm.heldout import gate_margin
from pipeline.train_vlm.objective import soft_contrastive_loss, soft_targets
from rmtl.task import Task

CAPTION_EVAL_SALT = 104729
"""Mixed into the run seed for the held-out sample, so it differs from the training draws."""


class HeldOutCaptions:
    """The training objective on held-out episodes of every family: a fixed sample of (row, view)
    pairs with one caption each, drawn once, so that evaluations are comparable. No prompt text is
    embedded: the captions come from the run's own caption options, as in training."""

    def __init__(self, data: TrainingData, rows: np.ndarray, cfg, task: Task, geometry: torch.Tensor,
                 stored_embeddings: Callable[[np.ndarray], np.ndarray | None]):
        rng = np.random.default_rng([cfg.seed, CAPTION_EVAL_SALT])
        n = min(len(rows), cfg.caption_eval_samples)
        if n < 2:
            raise ValueError(f"the held-out caption loss needs at least 2 held-out rows; got {len(rows)}")
        size = min(cfg.batch_size, n)
        # Only full batches: the loss of a contrastive batch depends on its size.
        pick = rng.choice(rows, size=n - n % size, replace=False)
        views = rng.integers(len(data.views), size=len(pick))
        self.rows = pick
        self.batches = [slice(b, b + size) for b in range(0, len(pick), size)]
        self.captions = task.captions(data.states[pick], rng, **cfg.caption_options())
        self.targets = [soft_targets(geometry[torch.from_numpy(pick[b]).to(geometry.device)], cfg.soft_sigma,
                                     cfg.soft_sigma_wide) for b in self.batches]
        stored = stored_embeddings(pick)
        self.image_embeddings = None if stored is None else stored[np.arange(len(pick)), views]
        # Held-out frames are always in memory (another model than the trained one encodes them).
        self.frames = data.frames[pick][np.arange(len(pick)), views]

    def loss(self, vlm, stored: bool = True, batch_size: int = 512) -> float:
        """Mean soft contrastive loss of ``vlm`` (in eval mode, no augmentation) over the sample's
        batches; ``stored``: use the locked image tower's stored embeddings (the trained model only)."""
        was_training = vlm.model.training
        vlm.model.eval()
        with torch.no_grad():
            img = (self.image_embeddings if stored and self.image_embeddings is not None
                   else vlm.encode_images(self.frames, batch_size=batch_size))
            unique = sorted(set(self.captions))
            text = np.concatenate([vlm.encode_text(unique[i:i + batch_size]) for i in range(0, len(unique), batch_size)])
            index = {c: i for i, c in enumerate(unique)}
            txt = torch.from_numpy(text[[index[c] for c in self.captions]]).to(vlm.device)
            img = torch.from_numpy(np.asarray(img, dtype=np.float32)).to(vlm.device)
            img = torch.nn.functional.normalize(img, dim=-1)
            scale = vlm.model.logit_scale.exp().float()
            losses = [soft_contrastive_loss(scale * img[b] @ txt[b].T, t).item() for b, t in zip(self.batches, self.targets)]
        if was_training:
            vlm.model.train()
        return float(np.mean(losses))


@dataclass
class Selection:
    """The best evaluation so far under ``select_by`` and the evaluations since it improved."""

    select_by: str
    best: tuple[float, int, dict] | None = None
    """(score, higher is better; step; a copy of the weights)."""
    since_best: int = 0

    def score(self, metrics: dict) -> float | None:
        """The selection objective of one evaluation as a score to maximise (None: 'last')."""
        if self.select_by == "gate_margin":
            return gate_margin(metrics)
        if self.select_by == "caption_loss":
            return float(np.nan_to_num(-metrics["held_out_caption_loss"], nan=-np.inf))
        return None

    def update(self, metrics: dict, step: int, model) -> None:
        """Keep a copy of the model's weights when ``metrics`` beat the best so far."""
        score = self.score(metrics)
        if score is None:
            return
        if self.best is None or score > self.best[0]:
            self.best = (score, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            self.since_best = 0
        else:
            self.since_best += 1

    def patience_spent(self, patience: int | None) -> bool:
        return patience is not None and self.since_best >= patience

    def state(self) -> dict:
        """What the checkpoint keeps to resume selection and patience."""
        return {"select_by": self.select_by, "best": self.best, "since_best": self.since_best}

    @classmethod
    def resumed(cls, select_by: str, state: dict | None) -> Selection:
        """The selection a checkpoint saved; a fresh one when it selected by another objective."""
        if not state or state.get("select_by") != select_by:
            return cls(select_by)
        best = state.get("best")
        return cls(select_by, tuple(best) if best is not None else None, int(state.get("since_best", 0)))

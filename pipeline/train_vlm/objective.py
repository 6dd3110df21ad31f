"""What domain-CLIP training minimises: OpenCLIP's symmetric InfoNCE with soft targets from task
geometry, plus the baseline-balance penalty; and the optimiser's parameter groups and schedule."""

from __future__ import annotations

import math

import numpy as np
import torch

from rmtl.task import Task
from rmtl.tasks import get_task


def task_geometry(states: np.ndarray, task: Task | None = None) -> np.ndarray:
    """Features the soft targets compare (m), the task's ``soft_target_geometry`` (pick-and-lift:
    gripper-to-cube offset, finger opening, lift x3)."""
    return (task or get_task()).soft_target_geometry(states)


def soft_targets(geometry, sigma: float, sigma_wide: float = 0.0):
    """Row-stochastic target matrix from pairwise geometry distances (torch); with
    ``sigma_wide`` > 0 the mean of a narrow and a wide kernel."""
    if sigma <= 0:
        return torch.eye(len(geometry), device=geometry.device)
    d2 = torch.cdist(geometry, geometry).pow(2)
    targets = torch.softmax(-d2 / (2 * sigma * sigma), dim=1)
    if sigma_wide > 0:
        targets = 0.5 * (targets + torch.softmax(-d2 / (2 * sigma_wide * sigma_wide), dim=1))
    return targets


def soft_contrastive_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Symmetric cross-entropy of image-to-text and text-to-image logits against soft targets."""
    return 0.5 * (torch.sum(-targets * logits.log_softmax(1), 1).mean()
                  + torch.sum(-targets.T * logits.T.log_softmax(1), 1).mean())


def baseline_balance_penalty(goals, baseline):
    """Sum of squared deviations of each goal's cosine to the baseline from their mean (torch).

    Why: with unit image x, goal g and baseline b, the projected score at alpha near 1 is
    about const - (m - D)^2 / (4 m), where m = 1 - g.b and D = x.g - x.b. Image-text
    similarities sit far below text-text ones (the modality gap), so D << m and the score
    is about const - m/4 + D/2: a goal near the baseline scores higher on *every* image.
    Contrastive training fixes D but leaves m free; equal m makes prompts comparable.
    """
    cos = goals @ baseline
    return ((cos - cos.mean()) ** 2).sum()


def balance_prompts(task: Task) -> list[str]:
    """The texts the balance penalty compares: the baseline's and each goal's first phrasing."""
    paper = task.prompts()
    return [paper.baseline[0], *(phrasings[0] for phrasings in paper.goals())]


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW groups: no weight decay on biases, norms, embeddings or the logit scale."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or "bn" in name or "ln" in name or "embedding" in name or "logit_scale" in name:
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_at(step: int, cfg, progress: float = 0.0) -> float:
    """Linear warm-up, then cosine decay over max(step progress, time progress)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    t = max(progress, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))

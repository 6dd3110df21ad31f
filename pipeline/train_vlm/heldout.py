"""Held-out evaluation: the task's reward-quality metrics of a model under the paper prompts, and
their worst gate ratio (what ``select_by gate_margin`` picks the weights by)."""

from __future__ import annotations

import numpy as np

from pipeline.train_vlm.data import TrainingData, encode_rows
from rmtl.reward.prompts import embed_prompts
from rmtl.task import QualityInputs, Task
from rmtl.tasks import get_task
from rmtl.reward.projection import DEFAULT_ALPHA


def evaluate(vlm, data: TrainingData, rows: np.ndarray, alpha: float = DEFAULT_ALPHA, batch_size: int = 512,
             image_embeddings: np.ndarray | None = None, task: Task | None = None) -> dict:
    """Reward-quality metrics of ``vlm`` on the given rows (all views), paper prompts;
    ``image_embeddings`` [len(rows), V, D] skips encoding the frames (locked image tower)."""
    task = task or get_task()
    was_training = vlm.model.training
    vlm.model.eval()
    emb = image_embeddings if image_embeddings is not None else encode_rows(vlm, data, rows, batch_size)
    text = embed_prompts(vlm.encode_text, task.prompts())
    if was_training:
        vlm.model.train()
    inputs = QualityInputs(emb, data.states[rows], data.episode[rows], data.step[rows], list(data.views))
    return task.quality_metrics(inputs, text.goals, text.baseline, alpha)


def gate_margin(metrics: dict, task: Task | None = None) -> float:
    """The worst ratio of a multi-view metric to its acceptance gate (the task's ``quality_gates``):
    above 1 when every rank gate passes. Model selection uses held-out training episodes,
    never the store the gates are finally reported on."""
    gates = (task or get_task()).quality_gates
    return float(min(np.nan_to_num(metrics["mean"][k], nan=-1.0) / v for k, v in gates.items()))


def summary(m: dict) -> str:
    """One line of the metrics a run prints after each evaluation."""
    x = m["mean"]
    return (f"approach {x['approach_spearman']:.3f} (spread {x['approach_spread']:.3f})  "
            f"align {x['align_spearman']:.3f} (spread {x['align_spread']:.3f})  "
            f"grasp AUC {x['grasp_auc']:.3f}  right prompt {x['right_prompt_accuracy']:.3f}  goal-baseline cosine "
            + ("/".join(f"{c:.2f}" for c in m.get("goal_baseline_cosine", {}).values()) or "n/a"))

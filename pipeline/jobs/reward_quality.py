"""``rmtl reward-quality``: the acceptance metrics of a reward model beside a random-weight one, from
a store's embeddings (pick-and-lift's within-phase gates), and per source where the store has
several (noise levels, checkpoints: pipeline.jobs.gate_set)."""

from __future__ import annotations

from typing import Any

from pipeline.jobs.render_and_embed import quality_summary
from pipeline.stores.questions import prompt_set_of
from rmtl.config import Config
from rmtl.default_model import DEFAULT_MODEL, RANDOM_REFERENCE
from rmtl.reward.projection import DEFAULT_ALPHA


class RewardQualityConfig(Config):
    """``rmtl reward-quality``: acceptance metrics of a reward model beside a random-weight one."""

    store: str
    """Dataset store with embeddings of both models."""
    model: str = DEFAULT_MODEL
    """Model to judge: a model spec or a stored model id."""
    against: str = RANDOM_REFERENCE
    """Model to compare with (random weights): spec or stored id."""
    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""
    out: str | None = None
    """JSON path for all metrics and gates."""
    prompts: str | None = None
    """Prompt-set YAML file or a shipped set's name (default: the paper's prompts)."""


def run(cfg: RewardQualityConfig) -> dict[str, Any]:
    """The metrics of ``cfg.model`` and ``cfg.against``, the task's gates on them, and the metrics
    per source (``groups``, one entry when the store has one source)."""
    from pipeline.jobs.gate_set import grouped_quality
    from rmtl.tasks import get_task

    task = get_task()
    if task.gate_report is None:
        from rmtl.errors import ConfigError

        raise ConfigError(f"task {task.name} defines no quality gates (Task.gate_report); reward-quality judges "
                          f"only a task that has them")
    pset = prompt_set_of(cfg.prompts)
    model = quality_summary(cfg.store, cfg.model, cfg.alpha, pset)
    against = quality_summary(cfg.store, cfg.against, cfg.alpha, pset)
    return {"store": cfg.store, "model": model, "against": against, "gates": task.gate_report(model, against),
            "groups": grouped_quality(cfg.store, cfg.model, cfg.alpha, pset)}

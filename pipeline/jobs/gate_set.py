"""The off-expert gate set: reward quality on the states a learning policy visits.

An expert store shows the reward on the states an expert passes through. A learner visits
others (hovering beside the cube, pushing it, closing the jaws too early), so the
within-phase gates are also measured on

- noisy experts at several noise levels: one store whose episodes cycle through the
  levels (every curriculum stage meets every level), and
- rollouts of learner checkpoints: one store per Stage-1 checkpoint, actions sampled as in
  training.

:func:`gate_set_configs` gives the render-and-embed jobs of such a set, :func:`build_gate_set`
runs them (and embeds the comparison model the gates need), and :func:`grouped_quality`
splits a store's within-phase metrics by source (noise level or checkpoint), using the
rollout settings recorded in the store: the label of episode i is recomputed from
``(seed, i)`` (pipeline.jobs.rollout.plan_episode), so no extra column is stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from rmtl.config import MAX_EPISODES, Config
from rmtl.default_model import DEFAULT_MODEL, RANDOM_REFERENCE
from rmtl.reward.projection import DEFAULT_ALPHA

DEFAULT_NOISE_LEVELS: tuple[float, ...] = (0.1, 0.3, 0.6, 1.0)
"""Expert action-noise standard deviations (actions lie in [-1, 1]); 1.0 is close to random."""

GROUP_COLUMNS = (("approach rank", "approach_spearman", "approach_count"),
                 ("align rank", "align_spearman", "align_count"),
                 ("grasp AUC", "grasp_auc", "grasp_count"),
                 ("right prompt", "right_prompt_accuracy", None))
"""Per-source table columns: (header, metric, count of states it is measured on)."""


def checkpoint_store_name(checkpoint: str | Path) -> str:
    """``<run>_<step dir>`` of a Stage-1 checkpoint, the store name of its rollouts."""
    from rmtl.train.eval.evaluate import resolve_checkpoint

    ck = resolve_checkpoint(checkpoint)
    return f"{ck.parent.parent.name}_{ck.name}"


def gate_set_configs(out_dir: str | Path, *, checkpoints: Sequence[str | Path] = (),
                     noise_levels: Sequence[float] | None = DEFAULT_NOISE_LEVELS, episodes: int = 100,
                     model: str = DEFAULT_MODEL, seed: int = 50_000, **common: Any) -> list:
    """Render-and-embed configs: ``noisy_expert.zarr`` (skipped if ``noise_levels`` is None)
    and ``<run>_<step>.zarr`` per checkpoint, all under ``out_dir``. ``common``: further
    RenderAndEmbedConfig fields (views, stages, workers, batch_size...)."""
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig
    from rmtl.train.eval.evaluate import resolve_checkpoint

    out = Path(out_dir)
    configs = []
    if noise_levels is not None:
        configs.append(RenderAndEmbedConfig.make(store=str(out / "noisy_expert.zarr"), policy="expert",
                                                 noise_levels=tuple(noise_levels), episodes=episodes, model=model,
                                                 seed=seed, **common))
    for ck in checkpoints:
        zip_path = resolve_checkpoint(ck) / "model.zip"
        configs.append(RenderAndEmbedConfig.make(store=str(out / f"{checkpoint_store_name(ck)}.zarr"),
                                                 policy=str(zip_path), episodes=episodes, model=model, seed=seed,
                                                 **common))
    return configs


def build_gate_set(configs: Sequence[Any], against: str | None = RANDOM_REFERENCE,
                   progress: bool = True) -> list[dict]:
    """Run each render-and-embed job (resumable), then embed ``against`` (the comparison
    model of ``rmtl reward-quality``) too; returns the jobs' summaries."""
    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render_and_embed import render_and_embed

    summaries = []
    for cfg in configs:
        summaries.append(render_and_embed(cfg, progress=progress))
        if against is not None:
            embed_store(cfg.store_path(), against, batch_size=cfg.batch_size, progress=progress)
    return summaries


def episode_groups(store: Any) -> dict[int, str]:
    """Source label of every episode of a rendered store ('expert noise 0.3', 'random',
    'checkpoint step_000560000'), from its recorded rollout settings."""
    from pipeline.jobs.rollout import RolloutConfig, plan_episode, policy_label

    rollout = store.info.get("provenance", {}).get("rollout")
    episodes = [int(e) for e in store.episodes() if e >= 0]
    if not rollout:
        return {e: "unknown" for e in episodes}
    # No validation: a checkpoint that produced the store may since have been deleted.
    cfg = RolloutConfig.model_construct(**rollout)
    return {e: policy_label(cfg, plan_episode(cfg, e)) for e in episodes}


def grouped_quality(store_path: str, model: str, alpha: float = DEFAULT_ALPHA, prompts: Any = None) -> dict[str, dict]:
    """Within-phase reward-quality metrics (the task's ``quality_metrics``; pick-and-lift) of each source
    of a store, keyed by its label, in label order; ``prompts``: a PromptConfig or a
    micro-task PromptSet (default: the paper's prompts)."""
    from pipeline.stores.store_models import resolve_model_id
    from pipeline.stores.stored_text import text_embeddings
    from rmtl.task import QualityInputs
    from rmtl.tasks import get_task
    from storage.dataset import DatasetStore

    with DatasetStore.open(store_path, "r") as store:
        model_id = resolve_model_id(store, model)
        n = store.embedded_rows(model_id)
        cols = store.read(slice(0, n), fields=["state", "episode", "step"])
        text = text_embeddings(store, model_id, prompts)
        emb = store.embeddings(model_id, slice(0, n))
        groups = episode_groups(store)
        views = store.views
    label = np.array([groups.get(int(e), "live") for e in cols["episode"]])
    out = {}
    for name in sorted(set(label.tolist())):
        m = label == name
        inputs = QualityInputs(emb[m], cols["state"][m], cols["episode"][m], cols["step"][m], views)
        out[name] = get_task().quality_metrics(inputs, text.goals, text.baseline, alpha)
        out[name]["episodes"] = int(len(np.unique(cols["episode"][m])))
    return out


def group_table(store_path: str, groups: dict[str, dict], model: str):
    """A rich table of the within-phase metrics per source (multi-view mean), each with the
    number of states it is measured on."""
    from rich.table import Table

    from rmtl.tasks import get_task

    gates = ", ".join(f"{k} {v}" for k, v in get_task().quality_gates.items())
    table = Table(title=f"{store_path}: {model} per source (multi-view mean)", caption=f"gates: {gates}")
    for col in ("source", "episodes", *(c[0] for c in GROUP_COLUMNS)):
        table.add_column(col)
    for name, m in groups.items():
        x = m["mean"]
        cells = [f"{x[key]:.3f}" + (f" ({x[count]})" if count else "") for _, key, count in GROUP_COLUMNS]
        table.add_row(name, str(m["episodes"]), *cells)
    return table


class GateSetConfig(Config):
    """``rmtl gate-set``: noisy experts and learner checkpoints rendered and embedded."""

    out: str
    """Directory for the gate stores."""
    checkpoint: tuple[str, ...] = ()
    """Stage-1 checkpoints (or run dirs) to roll out."""
    noise_levels: tuple[float, ...] | None = DEFAULT_NOISE_LEVELS
    """Expert noise levels ('none': no noisy-expert store)."""
    episodes: int = Field(100, ge=1, le=MAX_EPISODES)
    """Episodes per store."""
    model: str = DEFAULT_MODEL
    """VLM spec to embed with and judge."""
    against: str | None = RANDOM_REFERENCE
    """Comparison model embedded too ('none': skip)."""
    resolution: int | None = None
    """Frame size (px); default: the model's input size."""
    workers: int = Field(1, ge=1)
    """Render processes."""
    seed: int = Field(50_000, ge=0)
    """Base episode seed."""
    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""


def run(cfg: GateSetConfig) -> list[tuple[str, dict[str, dict]]]:
    """The gate set a config describes, built: each store's path and its within-phase quality per source."""
    configs = gate_set_configs(Path(cfg.out), checkpoints=[Path(c) for c in cfg.checkpoint],
                               noise_levels=cfg.noise_levels, episodes=cfg.episodes, model=cfg.model, seed=cfg.seed,
                               resolution=cfg.resolution, workers=cfg.workers)
    build_gate_set(configs, against=None if (cfg.against or "none").lower() == "none" else cfg.against)
    return [(c.store_path(), grouped_quality(c.store_path(), cfg.model, cfg.alpha)) for c in configs]

"""The main job: roll out and render episodes into a store, embed them, build the state
cache, and summarise reward quality. Each step is resumable and skipped when done.

The job holds the store's writer lock from rendering to the written summary, so a second
job on the same store fails at once ("locked by writer ...") instead of getting in
between its steps. Everything that needs neither the model nor rendering (the store path,
the rollout settings, whether the store opens and is free) is checked first
(:func:`preflight`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from pydantic import Field, field_validator, model_validator

from pipeline.jobs.rollout import EpisodeSpec
from pipeline.stores.questions import StoreLocation
from rmtl.default_model import DEFAULT_MODEL
from rmtl.env.cameras import Resolution
from rmtl.reward.projection import DEFAULT_ALPHA


class RenderAndEmbedConfig(EpisodeSpec, StoreLocation):
    """The render-and-embed job: ``rmtl render-and-embed``, the ``render-and-embed`` flow's one
    parameter and :func:`render_and_embed` (store, name: :class:`~pipeline.stores.questions.StoreLocation`;
    the episodes: :class:`~pipeline.jobs.rollout.EpisodeSpec`, shared with a rollout)."""

    resolution: Resolution | None = None
    """Frame size in px; None uses the model's input size."""
    model: str = DEFAULT_MODEL
    """VLM spec used to embed (see rmtl.vlm.spec)."""
    batch_size: int = Field(64, ge=1)
    """Images per VLM call."""
    workers: int = Field(1, ge=1)
    """Local render processes (a Dask LocalCluster when > 1)."""
    dask_address: str | None = None
    """Address of an existing Dask scheduler to render on instead."""
    dask_worker_wait_s: float | None = Field(None, gt=0)
    """Seconds to wait for a worker when the Dask scheduler has none (at the start, or after losing
    its last one mid-render) before stopping with one line (default: $RMTL_DASK_WORKER_WAIT_S, else 120)."""
    cache_kind: str = "flat"
    """FAISS index of the state cache: 'flat' or 'hnsw'."""
    alpha: float = Field(DEFAULT_ALPHA, ge=0, le=1)
    """Projection alpha of the quality summary."""

    @model_validator(mode="before")
    @classmethod
    def _model_renderer(cls, data: Any) -> Any:
        """Render with the renderer the model was trained on, unless told otherwise."""
        from rmtl.vlm.registry import with_declared_renderer

        return with_declared_renderer(data, ("model",), ("render",), DEFAULT_MODEL)

    @field_validator("cache_kind")
    @classmethod
    def _kind(cls, v):
        if v not in ("flat", "hnsw"):
            raise ValueError("cache_kind must be 'flat' or 'hnsw'")
        return v


def _opened(store_or_path):
    """A context giving a DatasetStore: an open one as is (the caller closes it), a path opened for reading."""
    import contextlib

    from storage.dataset import DatasetStore

    if isinstance(store_or_path, DatasetStore):
        return contextlib.nullcontext(store_or_path)
    return DatasetStore.open(store_or_path, "r")


def quality_summary(store_path, model: str, alpha: float = DEFAULT_ALPHA, prompts=None) -> dict:
    """Reward-quality metrics of a store's embeddings (all views); ``store_path``: a path or
    an open DatasetStore; ``model``: a stored model id or a model spec
    (pipeline.stores.store_models.resolve_model_id); ``prompts``: a PromptConfig or a micro-task
    PromptSet (default: the paper's prompts)."""
    from pipeline.stores.store_models import resolve_model_id
    from pipeline.stores.stored_text import text_embeddings
    from rmtl.errors import ConfigError
    from rmtl.reward.prompt_sets import PromptSet
    from rmtl.task import QualityInputs
    from rmtl.tasks import get_task

    if isinstance(prompts, PromptSet) and prompts.single_prompt:
        raise ConfigError(f"prompt set {prompts.name} is single-prompt; the quality gates need one goal per "
                          f"micro-task (rmtl prompt-study ranks single-prompt sets too)")

    with _opened(store_path) as store:
        model_id = resolve_model_id(store, model)
        n = store.embedded_rows(model_id)
        cols = store.read(slice(0, n), fields=["state", "episode", "step"])
        text = text_embeddings(store, model_id, prompts)
        inputs = QualityInputs(store.embeddings(model_id, slice(0, n)), cols["state"], cols["episode"],
                               cols["step"], store.views)
    return get_task().quality_metrics(inputs, text.goals, text.baseline, alpha)  # pick-and-lift's metrics


def rollout_config(cfg: RenderAndEmbedConfig, resolution: int):
    """The RolloutConfig of the job at the resolution chosen for the model."""
    from pipeline.jobs.rollout import RolloutConfig

    shared = {name: getattr(cfg, name) for name in EpisodeSpec.model_fields}
    return RolloutConfig.make(**shared, resolution=resolution)


def preflight(cfg: RenderAndEmbedConfig, say: Callable[[str], Any] | None = None) -> None:
    """Checks before the model loads or anything renders, each failing with one line: the
    rollout settings (stages, policy), a Dask scheduler at ``dask_address`` and a worker of it
    (waiting for one, said through ``say``: default stderr), that the store path can be written,
    and that an existing store opens and has no live writer."""
    from pipeline.jobs.render import check_settings
    from rmtl.console import check_store_path
    from storage.dataset import DatasetStore
    from storage.location import Location
    from storage.lock import WriterLock

    rollout = rollout_config(cfg, cfg.resolution or 64)  # the model picks the real resolution later
    if cfg.dask_address is not None:
        from pipeline.jobs.dask_cluster import dask_worker_wait, wait_for_dask_workers

        wait_for_dask_workers(cfg.dask_address, dask_worker_wait(cfg.dask_worker_wait_s), say)
    path = cfg.store_path()
    check_store_path(path, "store")
    loc = Location(path)
    if loc.exists() and not loc.is_empty_dir():
        with DatasetStore.open(path, "r") as store:
            WriterLock(loc).check_free()
            check_settings(store, rollout, resolution=cfg.resolution is not None)


def build_cache(path, model_id: str, kind: str) -> dict:
    """Load, extend or rebuild the store's FAISS state cache (persisted next to it);
    ``path``: a store path or an open DatasetStore."""
    from storage.cache import StateCache

    with _opened(path) as store:
        cache = StateCache.open(store, model_id, kind=kind)
        return {"files": [str(cache.index_location), str(cache.sidecar_location)], "status": cache.status,
                "indexed": cache.num_indexed}


def write_summary(cfg: RenderAndEmbedConfig, rendered, embedded, cache: dict, quality: dict, seconds: float) -> dict:
    """Write the run record and ``last_summary.json`` next to the store; return the summary."""
    from pipeline.stores.analysis_dataset import beside_store
    from rmtl.provenance import json_safe, portable_values, write_run_record

    path = cfg.store_path()
    run_dir = beside_store(path, ".runs")
    record = write_run_record(run_dir, cfg, cfg.seed, name=f"render-and-embed-{time.strftime('%Y%m%d-%H%M%S')}.json")
    summary = {
        "store": path, "rows": rendered.rows, "episodes_rendered": rendered.episodes_rendered,
        "resumed": rendered.resumed, "model_id": embedded.model_id, "rows_embedded": embedded.rows_embedded,
        "rows_copied": embedded.rows_copied, "copied_from": embedded.copied_from,
        "cache_files": cache["files"], "cache_status": cache["status"], "quality": quality,
        "run_record": str(record), "seconds": seconds,
    }
    # JSON has no NaN (a phase with no states): null, so any JSON reader takes the file
    (run_dir / "last_summary.json").write_text(json.dumps(json_safe(portable_values(summary)), indent=2, default=str,
                                                          allow_nan=False))
    summary["summary_file"] = str(run_dir / "last_summary.json")
    return summary


@dataclass(frozen=True)
class Steps:
    """The job's steps, which the plain command runs as functions and the Prefect flow as
    tasks (flows.render_and_embed); :func:`run_steps` calls them in the one order there is."""

    load_model: Callable[[str], Any]
    render: Callable[[Any, RenderAndEmbedConfig, Any, bool], Any]
    """(store open as writer, config, rollout config, resumed?) -> RenderResult."""
    embed: Callable[[Any, Any, int], Any]
    """(store, VLM, batch size) -> EmbedResult."""
    build_cache: Callable[[Any, str, str], dict]
    quality: Callable[[Any, str, float], dict]
    say: Callable[[str], Any] | None = None
    """Where a wait is told (a Dask scheduler with no worker): None prints it on stderr."""


def local_steps(progress: bool = True) -> Steps:
    """The steps as plain functions (progress bars on the terminal when ``progress``). Each imports
    what it needs when it runs, so the checks before the first step come before open_clip,
    torch and MuJoCo load."""

    def load_model(spec: str) -> Any:
        from rmtl.vlm import load_vlm

        return load_vlm(spec)

    def render(store: Any, cfg: RenderAndEmbedConfig, rollout: Any, resumed: bool) -> Any:
        from pipeline.jobs.render import render_into

        return render_into(store, rollout, resumed, workers=cfg.workers, dask_address=cfg.dask_address,
                           progress=progress, worker_wait=cfg.dask_worker_wait_s)

    def embed(store: Any, vlm: Any, batch: int) -> Any:
        from pipeline.jobs.embed import embed_store

        return embed_store(store, vlm, batch_size=batch, progress=progress)

    return Steps(load_model, render, embed, build_cache, quality_summary)


def run_steps(cfg: RenderAndEmbedConfig, steps: Steps) -> dict:
    """Checks first, then the model (a bad spec fails before any rendering), then render, embed,
    cache and quality with the store's writer lock held throughout; returns the summary."""
    from dataclasses import replace

    from pipeline.jobs.render import open_for_render

    t0 = time.perf_counter()
    preflight(cfg, steps.say)  # before the heavy imports and the model
    vlm = steps.load_model(cfg.model)
    path = cfg.store_path()
    rollout = rollout_config(cfg, cfg.resolution or vlm.image_size)
    store, resumed = open_for_render(path, rollout)
    with store:  # one writer lock for the whole job
        rendered = replace(steps.render(store, cfg, rollout, resumed), store=path)
        embedded = steps.embed(store, vlm, cfg.batch_size)
        cache = steps.build_cache(store, vlm.model_id, cfg.cache_kind)
        quality = steps.quality(store, vlm.model_id, cfg.alpha)
        return write_summary(cfg, rendered, embedded, cache, quality, time.perf_counter() - t0)


def render_and_embed(cfg: RenderAndEmbedConfig, progress: bool = True) -> dict:
    """Run the job; returns a summary with the paths of what it wrote."""
    return run_steps(cfg, local_steps(progress))


def format_summary(summary: dict) -> str:
    """A short human-readable reward-quality summary with the paths written."""
    from rmtl.provenance import expand_data_dir

    q = summary["quality"]["mean"]
    f = lambda x: "n/a" if x is None or x != x else f"{x:.4g}"  # noqa: E731  (NaN/null: a phase with no states)
    # a summary read back from last_summary.json holds $RMTL_DATA_DIR/... paths: print them expanded
    shown = lambda p: str(p) if "://" in str(p) else str(expand_data_dir(p))  # noqa: E731
    lines = [
        f"store {shown(summary['store'])}: {summary['rows']} rows ({summary['episodes_rendered']} episodes rendered now), "
        f"embeddings {summary['model_id']}"
        + (f" ({summary['rows_copied']} rows copied from {summary['copied_from']}: same image tower)"
           if summary.get("rows_copied") else ""),
        f"reward quality (multi-view mean, alpha {summary['quality']['alpha']:.1f}, within rule phases):",
        f"  approach: Spearman(score, -distance) {f(q['approach_spearman'])}, p5-p95 spread {f(q['approach_spread'])}, n={q['approach_count']}",
        f"  align:    Spearman(score, -distance) {f(q['align_spearman'])}, p5-p95 spread {f(q['align_spread'])}, n={q['align_count']}",
        f"  grasp:    lifted-vs-resting ROC AUC {f(q['grasp_auc'])}, spread {f(q['grasp_spread'])}, n={q['grasp_count']}",
        f"  right prompt on its target states: {f(q['right_prompt_accuracy'])}",
        f"  step-to-step variation: mean {f(q['step_variation'])}, views "
        + ", ".join(f"{v} {f(m['step_variation'])}" for v, m in summary["quality"]["views"].items()),
        "wrote:",
        f"  {shown(summary['store'])}",
        *[f"  {shown(p)}" for p in summary["cache_files"]],
        f"  {shown(summary['run_record'])}",
        f"  {shown(summary['summary_file'])}",
    ]
    return "\n".join(lines)

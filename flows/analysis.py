"""Prefect flows over stored data: ``alpha-sweep``, ``per-view-analysis`` (no rendering,
scores from stored embeddings) and ``bc-labels`` (rule phase labels on policy rollouts).

Each flow is one task around the analysis step of the same name (pipeline.alpha_sweep, pipeline.per_view, pipeline.bc_labels) (the work is
vectorised inside it), logs the step's summary and returns the step's result as a dict
(paths of the datasets and PNGs written, plus the summary). Parameters are the step's
arguments; the store is ``store`` (a path or URL) or ``<data dir>/stores/<name>.zarr``,
as for render-and-embed. The steps are recomputations (analyses) or resumable appends
(bc-labels), so a task is retried once on an unexpected error, never on a user error.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows import one_line_failures
from flows.render_and_embed import retry_unless_user_error
from pipeline.alpha_sweep import DEFAULT_ALPHAS
from rmtl.reward.projection import DEFAULT_ALPHA

_TASK = dict(cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=2,
             retry_condition_fn=retry_unless_user_error)


def store_path(store: str | None, name: str) -> str:
    """``store`` or the data directory's ``stores/<name>.zarr`` (render-and-embed's rule)."""
    from pipeline.render_and_embed import RenderAndEmbedConfig

    return RenderAndEmbedConfig.make(store=store, name=name).store_path()


def _log_result(title: str, result: Any) -> dict:
    out = dataclasses.asdict(result)
    get_run_logger().info("%s\n%s", title, json.dumps(out, indent=2, default=str))
    return out


# -- alpha sweep -----------------------------------------------------------------------------
@task(name="alpha-sweep", **_TASK)
def alpha_sweep_task(path: str, model: str | None, alphas: list[float], out_dir: str | None, episode: int | None,
                     bins: int, plots: bool):
    from pipeline.alpha_sweep import alpha_sweep

    return alpha_sweep(path, model, alphas=alphas, out_dir=out_dir, episode=episode, bins=bins, plots=plots)


@flow(name="alpha-sweep", description="Scores for alpha in 0, 0.1, ..., 1 from stored embeddings (paper Fig. 10/11).")
@one_line_failures
def alpha_sweep_flow(
    store: str | None = None,
    name: str = "default",
    model: str | None = None,
    alphas: list[float] = list(DEFAULT_ALPHAS),
    out_dir: str | None = None,
    episode: int | None = None,
    bins: int = 20,
    plots: bool = True,
) -> dict:
    """Alpha sweep of a store (model: stored model id or spec; None when the store has one)."""
    result = alpha_sweep_task(store_path(store, name), model, alphas, out_dir, episode, bins, plots)
    return _log_result("alpha-sweep result", result)


# -- per-view analysis -----------------------------------------------------------------------
@task(name="per-view-analysis", **_TASK)
def per_view_task(path: str, model: str | None, alpha: float, out_dir: str | None, episodes: list[int] | None,
                  row: int | None, plots: bool):
    from pipeline.per_view import per_view_analysis

    return per_view_analysis(path, model, alpha=alpha, out_dir=out_dir, episodes=episodes, row=row, plots=plots)


@flow(name="per-view-analysis",
      description="Per-view vs view-mean scores, smoothness, view disagreement, phase-switch jumps (Fig. 3/8).")
@one_line_failures
def per_view_analysis_flow(
    store: str | None = None,
    name: str = "default",
    model: str | None = None,
    alpha: float = DEFAULT_ALPHA,
    out_dir: str | None = None,
    episodes: list[int] | None = None,
    row: int | None = None,
    plots: bool = True,
) -> dict:
    """Per-view analysis of a store."""
    result = per_view_task(store_path(store, name), model, alpha, out_dir, episodes, row, plots)
    return _log_result("per-view-analysis result", result)


# -- BC labels -------------------------------------------------------------------------------
@task(name="bc-labels", **_TASK)
def bc_labels_task(path: str, policy: str, episodes: int, noise_std: float, stages: list[int], seed: int,
                   chunk: int, overwrite: bool, minari: str | None = None):
    from pipeline.bc_labels import bc_labels

    return bc_labels(path, policy=policy, episodes=episodes, noise_std=noise_std, stages=stages, seed=seed,
                     chunk=chunk, overwrite=overwrite, progress=False, minari=minari)


@flow(name="bc-labels", description="Rule phase labels on rollouts of a policy (Stage-2 BC warm start), no frames.")
@one_line_failures
def bc_labels_flow(
    store: str | None = None,
    name: str = "bc-labels",
    policy: str = "expert",
    episodes: int = 250,
    noise_std: float = 0.15,
    stages: list[int] = [0, 1, 2, 3, 4],  # noqa: B006 (never mutated)
    seed: int = 0,
    chunk: int = 25,
    overwrite: bool = False,
    minari: str | None = None,
) -> dict:
    """BC labels into a frames-free store (resumable); ``minari``: also write them as the
    Minari dataset of that name (pipeline.minari_export, under $MINARI_DATASETS_PATH)."""
    result = bc_labels_task(store_path(store, name), policy, episodes, noise_std, stages, seed, chunk, overwrite,
                            minari)
    return _log_result("bc-labels result", result)

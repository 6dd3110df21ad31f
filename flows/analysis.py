"""Prefect flows over stored data: ``alpha-sweep``, ``per-view-analysis`` (no rendering,
scores from stored embeddings) and ``bc-labels`` (rule phase labels on policy rollouts).

Each flow takes one parameter, ``config``: the config class of its step
(pipeline.analyses.alpha_sweep.AlphaSweepConfig, pipeline.analyses.per_view.PerViewConfig,
pipeline.export.bc_labels.BCLabelsConfig), the class the ``rmtl`` command of the same name builds
its options from and the step's ``run`` takes, so the three take the same options. Each flow
is one task around the step's ``run`` (the work is vectorised inside it), logs the result
and returns it as a dict (paths of the datasets and PNGs written, plus the summary). The
store is ``store`` (a path or URL) or ``<data dir>/stores/<name>.zarr``
(pipeline.stores.questions.StoreLocation). As a deployment, fields left out take their defaults:

    prefect deployment run 'alpha-sweep/default' --param 'config={"name": "flows-demo", "alphas": [0, 0.5, 1]}'

The steps are recomputations (analyses) or resumable appends (bc-labels), so a task is
retried once on an unexpected error, never on a user error.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows.common import as_config, one_line_failures, retry_unless_user_error
from pipeline.analyses.alpha_sweep import AlphaSweepConfig
from pipeline.export.bc_labels import BCLabelsConfig
from pipeline.analyses.per_view import PerViewConfig

_TASK = dict(cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=2,
             retry_condition_fn=retry_unless_user_error)


def _log_result(title: str, result: Any) -> dict:
    out = dataclasses.asdict(result)
    get_run_logger().info("%s\n%s", title, json.dumps(out, indent=2, default=str))
    return out


# -- alpha sweep -----------------------------------------------------------------------------
@task(name="alpha-sweep", **_TASK)
def alpha_sweep_task(cfg: AlphaSweepConfig):
    from pipeline.analyses.alpha_sweep import run

    return run(cfg)


@flow(name="alpha-sweep", validate_parameters=False,
      description="Scores for alpha in 0, 0.1, ..., 1 from stored embeddings (paper Fig. 10/11).")
@one_line_failures
def alpha_sweep_flow(config: AlphaSweepConfig = AlphaSweepConfig()) -> dict:
    """Alpha sweep of a store (pipeline.analyses.alpha_sweep.AlphaSweepConfig)."""
    return _log_result("alpha-sweep result", alpha_sweep_task(as_config(AlphaSweepConfig, config)))


# -- per-view analysis -----------------------------------------------------------------------
@task(name="per-view-analysis", **_TASK)
def per_view_task(cfg: PerViewConfig):
    from pipeline.analyses.per_view import run

    return run(cfg)


@flow(name="per-view-analysis", validate_parameters=False,
      description="Per-view vs view-mean scores, smoothness, view disagreement, phase-switch jumps (Fig. 3/8).")
@one_line_failures
def per_view_analysis_flow(config: PerViewConfig = PerViewConfig()) -> dict:
    """Per-view analysis of a store (pipeline.analyses.per_view.PerViewConfig)."""
    return _log_result("per-view-analysis result", per_view_task(as_config(PerViewConfig, config)))


# -- BC labels -------------------------------------------------------------------------------
@task(name="bc-labels", **_TASK)
def bc_labels_task(cfg: BCLabelsConfig):
    from pipeline.export.bc_labels import run

    return run(cfg, progress=False)


@flow(name="bc-labels", validate_parameters=False,
      description="Rule phase labels on rollouts of a policy (Stage-2 BC warm start), no frames.")
@one_line_failures
def bc_labels_flow(config: BCLabelsConfig = BCLabelsConfig()) -> dict:
    """BC labels into a frames-free store (resumable; pipeline.export.bc_labels.BCLabelsConfig)."""
    return _log_result("bc-labels result", bc_labels_task(as_config(BCLabelsConfig, config)))

"""Prefect flow ``render-and-embed``: the main job of pipeline.jobs.render_and_embed as tasks.

Its one parameter, ``config``, is :class:`pipeline.jobs.render_and_embed.RenderAndEmbedConfig`,
the class ``rmtl render-and-embed`` builds its options from, so the command, the flow and
a Python caller take the same options (Prefect's UI shows the class's schema). A deployment
run's JSON is validated by ``RenderAndEmbedConfig.make``, so a bad value fails the run with
the same one-line error as the plain command. One task per pipeline
step (load model, render, embed, build cache, quality summary), run by
``pipeline.jobs.render_and_embed.run_steps`` (the one place that orders them, with the checks
first and the store's writer lock held across all of them); the parallel work (Dask rendering,
batched embedding) happens inside the steps, never one task per frame.

Render and embed are resumable (whole episodes / committed embedding runs), so they are
retried once on an unexpected error; user errors (bad config, foreign store, missing
weights: :data:`rmtl.errors.USER_ERRORS`) are not retried.

Run it:
- in-process: ``run_render_and_embed(RenderAndEmbedConfig(episodes=2, ...))`` (or ``python -m
  flows.render_and_embed --episodes 2 ...``): a temporary Prefect server, or the API in
  ``PREFECT_API_URL``;
- as a deployment: ``python -m flows.serve`` then
  ``prefect deployment run 'render-and-embed/default' --param 'config={"episodes": 2}'`` (the
  fields left out take their defaults).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows.common import as_config, one_line_failures, retry_unless_user_error, run_notice
from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, Steps, build_cache, format_summary, run_steps

FLOW_NAME = "render-and-embed"


_STEP = dict(cache_policy=NO_CACHE, persist_result=False)
_RETRY = dict(retries=1, retry_delay_seconds=2, retry_condition_fn=retry_unless_user_error)


@task(name="load-model", **_STEP)
def load_model(spec: str):
    """The VLM (first, so a bad model spec fails before any rendering)."""
    from rmtl.vlm import load_vlm

    return load_vlm(spec)


@task(name="render", **_STEP, **_RETRY)
def render(store: Any, cfg: RenderAndEmbedConfig, rollout: Any, resumed: bool):
    """Roll out and render the missing episodes into the store (open as writer; Dask inside
    when workers > 1)."""
    from pipeline.jobs.render import render_into

    result = render_into(store, rollout, resumed, workers=cfg.workers, dask_address=cfg.dask_address,
                         progress=False, worker_wait=cfg.dask_worker_wait_s, say=run_notice)
    get_run_logger().info("rendered %d episodes; store has %d rows", result.episodes_rendered, result.rows)
    return result


@task(name="embed", **_STEP, **_RETRY)
def embed(store: Any, vlm: Any, batch_size: int):
    """Embed the store's rows not yet embedded by the model, in batches."""
    from pipeline.jobs.embed import embed_store

    result = embed_store(store, vlm, batch_size=batch_size, progress=False)
    copied = f" ({result.rows_copied} copied from {result.copied_from}: same image tower)" if result.rows_copied else ""
    get_run_logger().info("embedded %d rows with %s%s", result.rows_embedded, result.model_id, copied)
    return result


@task(name="build-cache", **_STEP, **_RETRY)
def build_cache_task(path: Any, model_id: str, kind: str) -> dict:
    """Load, extend or rebuild the FAISS state cache of the store (persisted next to it)."""
    out = build_cache(path, model_id, kind)
    get_run_logger().info("state cache %s: %d rows indexed", out["status"], out["indexed"])
    return out


@task(name="quality-summary", **_STEP)
def quality(path: Any, model_id: str, alpha: float) -> dict:
    """Reward-quality metrics of the store's embeddings."""
    from pipeline.jobs.render_and_embed import quality_summary

    return quality_summary(path, model_id, alpha)


@flow(name=FLOW_NAME, validate_parameters=False,
      description="Roll out, render the camera bank into a Zarr store, embed with a VLM, build the FAISS "
                  "state cache, and log a reward-quality summary.")
@one_line_failures  # a user error: the console's one line as the state message (docs/flows.md)
def render_and_embed_flow(config: RenderAndEmbedConfig = RenderAndEmbedConfig()) -> dict:
    """Render-and-embed of ``config`` (pipeline.jobs.render_and_embed.RenderAndEmbedConfig)."""
    return _run(as_config(RenderAndEmbedConfig, config))


def _run(cfg: RenderAndEmbedConfig) -> dict:
    summary = run_steps(cfg, Steps(load_model, render, embed, build_cache_task, quality, say=run_notice))
    get_run_logger().info("render-and-embed summary\n%s", format_summary(summary))
    return summary


def run_render_and_embed(cfg: RenderAndEmbedConfig | None = None, **params: Any) -> dict:
    """The flow as a plain command: validate first (one-line error, no Prefect start-up),
    then run it in this process against ``PREFECT_API_URL`` or a temporary server."""
    from flows.prefect_settings import local_settings

    cfg = cfg if cfg is not None else RenderAndEmbedConfig.make(**params)
    with local_settings():
        return render_and_embed_flow(cfg)


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.render_and_embed --episodes 2 --views wide_view,close_up ...`` (options
    generated from RenderAndEmbedConfig, rmtl.config_cli); returns the exit status (errors:
    one line on stderr, rmtl.console)."""
    from rmtl.config_cli import Command, run_standalone

    command = Command("pipeline.jobs.render_and_embed:RenderAndEmbedConfig", "flows.render_and_embed:run_flow",
                      "Run the render-and-embed flow.")
    return run_standalone(command, argv, "python -m flows.render_and_embed")


def run_flow(cfg: RenderAndEmbedConfig) -> None:
    """Run the render-and-embed flow in this process."""
    print(format_summary(run_render_and_embed(cfg)))


if __name__ == "__main__":
    from rmtl.console import finish

    finish(main())

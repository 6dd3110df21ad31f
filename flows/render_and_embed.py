"""Prefect flow ``render-and-embed``: the main job of pipeline.render_and_embed as tasks.

Parameters are the fields of :class:`pipeline.render_and_embed.RenderAndEmbedConfig`
(same names and defaults), validated by ``RenderAndEmbedConfig.make`` so a bad value
fails the run with the same one-line error as the plain command. One task per pipeline
step (load model, render, embed, build cache, quality summary), run by
``pipeline.render_and_embed.run_steps`` (the one place that orders them, with the checks
first and the store's writer lock held across all of them); the parallel work (Dask rendering,
batched embedding) happens inside the steps, never one task per frame.

Render and embed are resumable (whole episodes / committed embedding runs), so they are
retried once on an unexpected error; user errors (bad config, foreign store, missing
weights: :data:`rmtl.errors.USER_ERRORS`) are not retried.

Run it:
- in-process: ``run_render_and_embed(episodes=2, ...)`` (or ``python -m flows.render_and_embed
  --episodes 2 ...``): a temporary Prefect server, or the API in ``PREFECT_API_URL``;
- as a deployment: ``python -m flows.serve`` then
  ``prefect deployment run 'render-and-embed/default' --param episodes=2``.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows import one_line_failures
from pipeline.render_and_embed import DEFAULT_MODEL, RenderAndEmbedConfig, Steps, build_cache, format_summary, run_steps
from rmtl.errors import USER_ERRORS

FLOW_NAME = "render-and-embed"
_D = dict(RenderAndEmbedConfig())  # the defaults as a config resolves them (views: the task's whole camera bank)


def retry_unless_user_error(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect retry condition: retry unexpected failures, never a user error."""
    try:
        state.result(raise_on_failure=True)
    except USER_ERRORS:
        return False
    except Exception:
        return True
    return True


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
    from pipeline.render import render_into

    result = render_into(store, rollout, resumed, workers=cfg.workers, dask_address=cfg.dask_address,
                         progress=False)
    get_run_logger().info("rendered %d episodes; store has %d rows", result.episodes_rendered, result.rows)
    return result


@task(name="embed", **_STEP, **_RETRY)
def embed(store: Any, vlm: Any, batch_size: int):
    """Embed the store's rows not yet embedded by the model, in batches."""
    from pipeline.embed import embed_store

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
    from pipeline.render_and_embed import quality_summary

    return quality_summary(path, model_id, alpha)


@flow(name=FLOW_NAME, validate_parameters=False,
      description="Roll out, render the camera bank into a Zarr store, embed with a VLM, build the FAISS "
                  "state cache, and log a reward-quality summary.")
@one_line_failures  # a user error: the console's one line as the state message (docs/flows.md)
def render_and_embed_flow(
    task: str = _D["task"],
    store: str | None = _D["store"],
    name: str = _D["name"],
    episodes: int = _D["episodes"],
    policy: str = _D["policy"],
    noise_std: float = _D["noise_std"],
    noise_levels: list[float] | None = _D["noise_levels"],
    deterministic: bool = _D["deterministic"],
    stages: list[int] = list(_D["stages"]),
    views: list[str] | str = list(_D["views"]),
    resolution: int | None = _D["resolution"],
    model: str = DEFAULT_MODEL,
    batch_size: int = _D["batch_size"],
    workers: int = _D["workers"],
    dask_address: str | None = _D["dask_address"],
    seed: int = _D["seed"],
    cache_kind: str = _D["cache_kind"],
    alpha: float = _D["alpha"],
    render: dict | None = _D["render"].model_dump(mode="json"),
) -> dict:
    """Render-and-embed (parameters: pipeline.render_and_embed.RenderAndEmbedConfig)."""

    cfg = RenderAndEmbedConfig.make(
        task=task, store=store, name=name, episodes=episodes, policy=policy, noise_std=noise_std, noise_levels=noise_levels,
        deterministic=deterministic, stages=stages, views=views,
        resolution=resolution, model=model, batch_size=batch_size, workers=workers, dask_address=dask_address,
        seed=seed, cache_kind=cache_kind, alpha=alpha, **({"render": render} if render is not None else {}))
    return _run(cfg)


def _run(cfg: RenderAndEmbedConfig) -> dict:
    summary = run_steps(cfg, Steps(load_model, render, embed, build_cache_task, quality))
    get_run_logger().info("render-and-embed summary\n%s", format_summary(summary))
    return summary


def run_render_and_embed(cfg: RenderAndEmbedConfig | None = None, **params: Any) -> dict:
    """The flow as a plain command: validate first (one-line error, no Prefect start-up),
    then run it in this process against ``PREFECT_API_URL`` or a temporary server."""
    from flows.server import local_settings

    cfg = cfg if cfg is not None else RenderAndEmbedConfig.make(**params)
    with local_settings():
        return render_and_embed_flow(**flow_parameters(cfg))


def flow_parameters(cfg: RenderAndEmbedConfig) -> dict:
    """The flow's parameters for a config (JSON-ready: what a deployment run takes)."""
    return cfg.model_dump(mode="json")


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.render_and_embed --episodes 2 --views wide_view,close_up ...`` (options
    generated from RenderAndEmbedConfig, rmtl.config_cli); returns the exit status (errors:
    one line on stderr, rmtl.console)."""
    from rmtl.config_cli import Command, run_standalone

    command = Command("pipeline.render_and_embed:RenderAndEmbedConfig", "flows.render_and_embed:run_flow",
                      "Run the render-and-embed flow.")
    return run_standalone(command, argv, "python -m flows.render_and_embed")


def run_flow(cfg: RenderAndEmbedConfig) -> None:
    """Run the render-and-embed flow in this process."""
    print(format_summary(run_render_and_embed(cfg)))


if __name__ == "__main__":
    from rmtl.console import finish

    finish(main())

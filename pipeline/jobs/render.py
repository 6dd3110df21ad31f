"""Render episodes into a dataset store (resumable), in parallel with Dask.

One writer (this process) appends whole chunks of episodes as workers finish them, so a
killed run leaves only complete episodes committed, and a rerun with the same config
renders only the episodes that are missing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.jobs.dask_cluster import scheduler_client
from pipeline.jobs.rollout import RolloutConfig, map_rollouts
from rmtl.env.render_settings import RENDERER_V1_ID
from rmtl.errors import StoreError

RESUME_KEYS = ("task", "policy", "noise_std", "noise_levels", "deterministic", "stages", "seed", "render_reset")
"""Rollout settings that must match to resume a store (views/resolution are checked too)."""


@dataclass(frozen=True)
class RenderResult:
    store: str
    rows: int
    episodes_rendered: int
    episodes_total: int
    resumed: bool


@contextlib.contextmanager
def dask_client(workers: int, address: str | None = None):
    """A Dask client on ``address`` (an existing cluster), or on a LocalCluster of
    ``workers`` single-threaded processes (rasterising in their own thread); None when workers <= 1 and no address."""
    if address is None and workers <= 1:
        yield None
        return
    if address is not None:
        with scheduler_client(address) as client:  # one line for an address that is no scheduler
            yield client
        return
    import logging

    from distributed import Client, LocalCluster

    from rmtl.env.threads import worker_thread_env

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.WARNING, env=worker_thread_env(1)) as cluster:
        with Client(cluster) as client:
            yield client


def renderer_profile(config: RolloutConfig) -> dict:
    """The renderer settings and id of a rollout config (the paper's domain, no shadows)."""
    from rmtl.tasks import get_task

    # The renderer settings are the default task's env config's (a run's ``env`` section, whatever its task).
    return get_task().env_config(render=config.render).render_profile()


def _same_checkpoint(recorded: Any, wanted: Any) -> bool:
    """Two checkpoint paths name the same policy when both files exist with the same bytes (a run
    committed in git has another path in every checkout)."""
    import hashlib

    paths = [Path(str(p)) for p in (recorded, wanted)]
    if not all(str(p).endswith(".zip") and p.is_file() for p in paths):
        return False
    return len({hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}) == 1


def check_settings(store, config: RolloutConfig, render: bool = True, kind: str = "rollout",
                   resolution: bool = True) -> None:
    """Raise one StoreError line if ``store`` was rendered with other settings than
    ``config`` (resolution=False: the resolution is not known yet and is not compared)."""
    provenance = store.info.get("provenance", {})
    rollout = provenance.get("rollout", {})
    wanted = config.model_dump(mode="json")
    # A key missing from an older store's provenance had its field's default then.
    diff = [k for k in RESUME_KEYS if rollout.get(k, RolloutConfig.model_fields[k].default) != wanted[k]
            and not (k == "policy" and _same_checkpoint(rollout.get(k), wanted[k]))]
    if render and (list(store.views) != list(config.views) or (resolution and store.resolution[0] != config.resolution)):
        diff.append("views/resolution")
    if render and (store.renderer_id or RENDERER_V1_ID) != renderer_profile(config)["renderer_id"]:
        diff.append(f"renderer {store.renderer_id or RENDERER_V1_ID} vs {renderer_profile(config)['renderer_id']}")
    if provenance.get("kind", "rollout") != kind or store.has_frames != render:
        diff.append(f"kind (not a {kind} store)")
    if diff:
        shown = ", ".join(f"{k} {rollout.get(k, RolloutConfig.model_fields[k].default)!r} there, {wanted[k]!r} now"
                          if k in wanted else k for k in diff)
        raise StoreError(f"{store.path} was rendered with different settings ({shown}); "
                         "use a new store path, or pass the settings it was made with")


def _open_or_create(path: str | Path, config: RolloutConfig, overwrite: bool, render: bool, kind: str):
    from storage.dataset import DatasetStore
    from storage.location import Location

    if not overwrite and not Location(path).is_empty_dir():  # a local path or a URL (s3://...)
        store = DatasetStore.open(path, "a")
        try:
            check_settings(store, config, render, kind)
        except BaseException:
            store.close()
            raise
        return store, True
    from rmtl.interrupts import deferred_sigint
    from rmtl.provenance import code_record, run_record

    description = config.the_task().store_description()
    store = None
    try:
        # Ctrl-C while the store is being made would leave one whose creation never committed, which
        # the same command cannot resume; it is held until the store is whole (empty, resumable).
        with deferred_sigint():
            store = DatasetStore.create(
                path, views=config.views, resolution=config.resolution, overwrite=overwrite, frames=render,
                **description, code=code_record(),
                visual_domain=True, renderer=renderer_profile(config) if render else None, seeds={"base": config.seed},
                provenance={"kind": kind, "policy": config.policy, "rollout": config.model_dump(mode="json"),
                            "run": run_record()},
            )
    except KeyboardInterrupt:
        if store is not None:
            store.close()  # its writer lock goes with it
        raise
    return store, False


def open_for_render(path: str | Path, config: RolloutConfig, overwrite: bool = False, render: bool = True,
                    kind: str = "rollout"):
    """(store open as its writer, resumed?) for rendering ``config`` into ``path``: an
    existing store whose settings match, or a new one. The caller closes it (``with``)."""
    return _open_or_create(path, config, overwrite, render, kind)


def render_into(store, config: RolloutConfig, resumed: bool, workers: int = 1, dask_address: str | None = None,
                chunk: int = 2, progress: bool = True, render: bool = True, kind: str = "rollout", *,
                worker_wait: float | None = None, say: Callable[[str], Any] | None = None) -> RenderResult:
    """Roll out the episodes of ``config`` missing from ``store`` (open as writer) into it.

    On a Dask scheduler (``dask_address``) with no worker left while episodes are pending, it says
    so (one line through ``say``, default stderr), goes on when a worker joins, and stops with one
    ConfigError line after ``worker_wait`` seconds (default: pipeline.jobs.dask_cluster.dask_worker_wait);
    the episodes committed so far stay, so the same command goes on from there."""
    from pipeline.jobs.dask_cluster import WorkerWait
    from rmtl.console import progress as progress_display

    done = set(store.episodes())
    todo = [e for e in range(config.episodes) if e not in done]
    name = Path(store.path).name
    stored = [config.episodes - len(todo)]
    with dask_client(workers, dask_address) as client, progress_display(progress) as bar:
        watch = None if dask_address is None else WorkerWait(
            client, dask_address, worker_wait, say,
            progress=lambda: f"{stored[0]} of {config.episodes} episodes are in {store.path}")
        task = bar.add_task(f"{'render' if render else kind} {name}", total=config.episodes, completed=stored[0])
        for batch in map_rollouts(config, todo, workers=1, chunk=chunk, client=client, render=render, watch=watch):
            store.append(batch)
            n = len(set(batch["episode"].tolist()))
            stored[0] += n
            bar.advance(task, n)
    return RenderResult(str(store.path), store.num_rows, len(todo), config.episodes, resumed)


def render_to_store(path: str | Path, config: RolloutConfig, workers: int = 1, dask_address: str | None = None,
                    chunk: int = 2, overwrite: bool = False, progress: bool = True, render: bool = True,
                    kind: str = "rollout") -> RenderResult:
    """Roll out ``config.episodes`` episodes into the store at ``path`` (created or resumed).

    render=False writes a frames-free store (states and labels only); ``kind`` is recorded
    in the provenance and must match to resume.
    """
    store, resumed = open_for_render(path, config, overwrite, render, kind)
    with store:
        res = render_into(store, config, resumed, workers=workers, dask_address=dask_address, chunk=chunk,
                          progress=progress, render=render, kind=kind)
    return RenderResult(str(path), res.rows, res.episodes_rendered, res.episodes_total, resumed)

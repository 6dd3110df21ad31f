"""Training as Prefect flows, their work-pool deployments, and sweeps run through them.

- ``train-stage1`` / ``train-stage2``: thin flows over the entry points of ``rmtl train stage1``
  and ``rmtl train stage2`` (:func:`rmtl.train.cli.run_stage1`, :func:`~rmtl.train.cli.run_stage2`),
  under the run's lock (:class:`rmtl.train.sweep.RunLock`), skipping a finished run.
- :func:`deploy`: a process work pool (created if missing) and a deployment of each flow on it,
  with a module-path entrypoint: a worker imports ``flows.train`` from the package installed
  (or on ``PYTHONPATH``) on its machine, so no code storage or image is involved.
- :func:`run_sweep`: one deployment run per sweep run (``run_deployment(..., timeout=0)``), a
  wait for all of them that notices runs lost with their worker, then the report. A run's outcome
  is what its run folder says, not its flow run's state (a worker killed alone leaves a trainer
  that finishes; a server down at a run's end leaves it Running or Crashed): such flow runs are
  recorded Completed (:func:`_reconcile`), and a lost API is named in one line (:func:`server_lost`).

Workers: ``prefect worker start --pool NAME --limit 1`` on each machine (docs/flows.md).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

from prefect import flow

from rmtl.errors import RmtlError
from rmtl.train.run.lock import DEFAULT_STALE_SECONDS, lock_info
from rmtl.train.sweep import (
    is_finished,
    last_start,
    plan,
    process_gone,
    run_path,
    started_by,
    train_run,
    train_stage2_run,
    write_report,
)
from rmtl.train.sweep_file import DEFAULT_POOL, Sweep, SweepRun

FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
RUN_TAG = "rmtl-run:"
"""Tag of a training flow run: ``rmtl-run:<output dir>`` (one run directory, however many tries)."""


def _flow_run_id() -> str | None:
    from prefect.runtime import flow_run

    return str(flow_run.id) if flow_run.id else None


@flow(name="train-stage1", persist_result=False)
def train_stage1_flow(variant: str = "rmtl", seed: int = 0, overrides: dict[str, Any] | None = None,
                      output_dir: str | None = None, total_timesteps: int | None = None,
                      lock_stale_seconds: float = DEFAULT_STALE_SECONDS) -> dict[str, Any]:
    """``rmtl train stage1 --variant V --seed S --out DIR --steps N --set k=v ...`` (``overrides``:
    dotted keys); resumes a run directory with ``resume/`` or checkpoints, skips a finished one."""
    return train_run(variant, seed, overrides or {}, output_dir, total_timesteps, stale_seconds=lock_stale_seconds,
                     flow_run_id=_flow_run_id())


@flow(name="train-stage2", persist_result=False)
def train_stage2_flow(worker: str, seed: int = 0, overrides: dict[str, Any] | None = None,
                      output_dir: str | None = None, total_timesteps: int | None = None,
                      lock_stale_seconds: float = DEFAULT_STALE_SECONDS) -> dict[str, Any]:
    """``rmtl train stage2 --worker CK --seed S --out DIR --steps N --set k=v ...``; resumes from
    the run directory's checkpoints, skips a run that trained ``total_timesteps``."""
    return train_stage2_run(worker, seed, overrides or {}, output_dir, total_timesteps, stale_seconds=lock_stale_seconds,
                            flow_run_id=_flow_run_id())


FLOWS = {"train-stage1": train_stage1_flow, "train-stage2": train_stage2_flow}


# -- deployments on a work pool ------------------------------------------------------------
def ensure_pool(pool: str, kind: str = "process") -> None:
    """Create work pool ``pool`` (with the worker type's default job template) unless it exists."""
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
            return
        except ObjectNotFound:
            pass
        from prefect.workers.process import ProcessWorker

        template = ProcessWorker.get_default_base_job_template() if kind == "process" else {}
        try:
            client.create_work_pool(WorkPoolCreate(name=pool, type=kind, base_job_template=template))
        except ObjectAlreadyExists:  # a worker started at the same moment created it
            pass


def deploy(pool: str = DEFAULT_POOL, name: str | None = None, flows: tuple[str, ...] = tuple(FLOWS)) -> list[str]:
    """Deployments ``<flow>/<name>`` (default name: the pool's) of the training flows on work pool
    ``pool``; returns their ids."""
    name = name or pool
    from prefect.deployments.runner import EntrypointType

    ensure_pool(pool)
    ids = []
    for flow_name in flows:
        d = FLOWS[flow_name].to_deployment(name=name, entrypoint_type=EntrypointType.MODULE_PATH, tags=["rmtl"],
                                           description=FLOWS[flow_name].description)
        ids.append(str(d.apply(work_pool_name=pool)))
    return ids


# -- a sweep through the deployments -------------------------------------------------------
RECONCILED = "rmtl sweep: the run folder says this flow run finished its run"
"""Start of the state message of a flow run the sweep recorded Completed after Prefect had it otherwise."""


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


def _api(path: str, body: dict | None = None) -> Any:
    from flows.local import api

    return api(_api_url(), path, body)


def _active_flow_runs(tag: str) -> list[dict]:
    return _api("/flow_runs/filter", {"flow_runs": {"tags": {"all_": [tag]},
                                                    "state": {"type": {"not_any_": list(FINAL_STATES)}}},
                                      "sort": "EXPECTED_START_TIME_DESC", "limit": 10})


def _set_state(flow_run_id: str, kind: str, message: str) -> None:
    _api(f"/flow_runs/{flow_run_id}/set_state", {"state": {"type": kind, "name": kind.title(), "message": message},
                                                 "force": True})


def _crash(flow_run_id: str, message: str) -> None:
    _set_state(flow_run_id, "CRASHED", message)


def _first_line(fr: dict) -> str:
    lines = (fr["state"].get("message") or "").strip().splitlines()
    return lines[0][:200] if lines else ""


def _reconcile(run: SweepRun, fr: dict, stale_seconds: float) -> str | None:
    """Record Completed a flow run that finished its run while Prefect had it otherwise (Crashed when
    its worker died, Running when the server was down at its end). Only the flow run that last started
    the run (``sweep_starts.jsonl``), and only once its process ended: a live one reports its own end.
    Returns the state it had (None: left as it was)."""
    run_dir = run_path(run.output_dir)
    start = last_start(run_dir)
    kind = fr["state"]["type"]
    if kind == "COMPLETED" or start.get("flow_run_id") != fr["id"] or not is_finished(run_dir, run.steps):
        return None
    if kind not in FINAL_STATES and not process_gone(start, run_dir, stale_seconds):
        return None
    was = _first_line(fr)
    _set_state(fr["id"], "COMPLETED", f"{RECONCILED} (Prefect had it {kind.title()}{': ' + was if was else ''})")
    return kind


def _reconcile_finished(run: SweepRun, sweep: Sweep, echo: Callable[[str], Any]) -> None:
    """A finished run's last flow run, recorded Completed if Prefect has it otherwise (:func:`_reconcile`)."""
    import urllib.error

    fid = last_start(run_path(run.output_dir)).get("flow_run_id")
    if not fid:
        return
    try:
        fr = _api(f"/flow_runs/{fid}")
    except urllib.error.HTTPError as e:
        if e.code == 404:  # recorded by another server, or its database was reset
            return
        raise
    was = _reconcile(run, fr, sweep.lock_stale_seconds)
    if was:
        echo(f"reconciled: {run.name} (flow run {fid} was {was.lower()} in Prefect, but it finished the run; "
             f"now recorded Completed)")


def _lost(run: SweepRun, fr: dict, stale_seconds: float) -> str | None:
    """Why a Pending or Running flow run of ``run`` is lost with its process (None: it is not).
    Nothing in Prefect OSS ends such a run: its worker or flow-run process was killed."""
    kind = fr["state"]["type"]
    if kind not in ("PENDING", "RUNNING"):
        return None
    run_dir = run_path(run.output_dir)
    info = lock_info(run_dir, stale_seconds)
    # a lock left by an earlier try is not this flow run's: until it takes the lock over, only time tells
    mine = info.holder.get("flow_run_id") == fr["id"]
    if info.state == "stale" and kind == "RUNNING" and mine:
        h = info.holder
        return f"its trainer ({h.get('host')} pid {h.get('pid')}) is gone (lock heartbeat {info.age:.0f} s old)"
    if not (info.state == "live" and mine) and not is_finished(run_dir, run.steps):
        since = fr["state"].get("timestamp") if kind == "PENDING" else fr.get("start_time") or fr["state"].get("timestamp")
        from datetime import datetime

        age = time.time() - datetime.fromisoformat(str(since).replace("Z", "+00:00")).timestamp() if since else 0
        if age > stale_seconds:  # a live trainer holds the lock within seconds of starting
            return f"{kind.lower()} for {age:.0f} s without taking the run's lock (its worker died before training)"
    return None


def submit(run: SweepRun, sweep: Sweep) -> str:
    """One deployment run of ``train-stage1/<deployment>`` (a Stage-2 run: ``train-stage2``) for ``run``; returns its id."""
    from prefect.deployments import run_deployment

    fr = run_deployment(f"train-stage{run.stage}/{sweep.deployment}", timeout=0, as_subflow=False,
                        flow_run_name=run.name, tags=[RUN_TAG + run.output_dir], parameters=sweep_parameters(run, sweep))
    return str(fr.id)


def server_lost(url: str, sweep: Sweep, err: BaseException) -> RmtlError:
    """The one line for a Prefect API that stopped answering mid-sweep: which runs train on without
    it (their trainers hold the run locks), which wait, and the way back."""
    from rmtl.console import one_line

    left = [r for r, state in plan(sweep) if state != "finished"]
    going = [r.name for r in left if lock_info(run_path(r.output_dir), sweep.lock_stale_seconds).state == "live"]
    waiting = [r.name for r in left if r.name not in going]
    parts = []
    if going:
        parts.append(f"{len(going)} run(s) train on without it ({', '.join(going)})")
    if waiting:
        parts.append(f"{len(waiting)} wait until it answers again ({', '.join(waiting)})")
    runs = "; ".join(parts) or "no run is left"
    # "Connection refused" rather than urllib's "<urlopen error [Errno 111] Connection refused>"
    why = getattr(getattr(err, "reason", None), "strerror", None) or one_line(f"{type(err).__name__}: {err}")[:120]
    return RmtlError(f"the Prefect API at {url} stopped answering ({why}); "
                     f"{runs}. Start it again with the same port and PREFECT_HOME (rmtl server start), restart any "
                     f"worker that exited, and run the same sweep again: it records the runs that finished meanwhile "
                     f"and resumes or waits for the others")


def run_sweep(sweep: Sweep, poll: float = 5.0, echo: Callable[[str], Any] = print) -> Path:
    """Deploy, submit every unfinished run that no live flow run or other process is training, wait
    for all, write the report. A run's outcome is what its run folder says (:func:`is_finished`),
    not its flow run's state: a flow run that ended Crashed or Failed after finishing its run counts
    as finished (and is recorded Completed), and a run another process holds is waited for. A run
    lost with its worker is marked Crashed and named in the error; running the same sweep again
    resumes it from its ``resume/`` state. A Prefect API that stops answering is named in one line
    (:func:`server_lost`). Returns the report directory."""
    url = _api_url()
    try:
        failed = _submit_and_wait(sweep, poll, echo)
    except RmtlError:
        raise
    except Exception as e:  # the API's client errors come in many types: the server's health decides
        from flows.prefect_settings import is_healthy

        if is_healthy(url, timeout=5):
            raise
        raise server_lost(url, sweep, e) from None
    if failed:
        raise RmtlError(f"{len(failed)} of {len(sweep.runs)} runs did not finish ({', '.join(failed)}); run the same "
                        f"sweep again to resume them (finished runs are skipped)")
    return write_report(sweep)


def _submit_and_wait(sweep: Sweep, poll: float, echo: Callable[[str], Any]) -> list[str]:
    """The body of :func:`run_sweep`; returns the names of the runs that did not finish."""
    deploy(sweep.pool, sweep.deployment)  # train-stage2 too: for Stage-2 runs started by hand on the same pool
    waiting: dict[str, SweepRun] = {}  # flow run id -> run
    held: dict[str, SweepRun] = {}  # run name -> run another process trains (--local, rmtl train, another server)
    for run, state in plan(sweep):
        _start(run, state, sweep, waiting, held, echo)
    failed: list[str] = []
    while waiting or held:
        time.sleep(poll)
        for fid, run in list(waiting.items()):
            if _flow_run_done(fid, run, sweep, held, failed, echo):
                del waiting[fid]
        for name, run in list(held.items()):
            if _held_run_done(run, sweep, failed, echo):
                del held[name]
    return failed


def _start(run: SweepRun, state: str, sweep: Sweep, waiting: dict[str, SweepRun], held: dict[str, SweepRun],
           echo: Callable[[str], Any]) -> None:
    """One run of the plan: a finished run reconciled, a live or queued flow run of it waited for (never a
    second copy), a run another process trains waited for, any other submitted."""
    if state == "finished":
        echo(f"done: {run.name}")
        _reconcile_finished(run, sweep, echo)
        return
    adopted = _adopt(run, sweep.lock_stale_seconds, echo)
    if adopted:
        echo(f"already submitted: {run.name} (flow run {adopted}, {state}); waiting for it")
        waiting[adopted] = run
        return
    info = lock_info(run_path(run.output_dir), sweep.lock_stale_seconds)
    if info.state == "live":  # a process that is no flow run of this server trains it: its flow run would fail
        echo(f"held: {run.name} (another process trains it: {info.holder_text}); waiting for it")
        held[run.name] = run
        return
    fid = submit(run, sweep)
    echo(f"submitted: {run.name} ({'resumes' if state == 'resumable' else 'new'}; flow run {fid})")
    waiting[fid] = run


def _adopt(run: SweepRun, stale: float, echo: Callable[[str], Any]) -> str | None:
    """The id of the newest live or queued flow run of ``run``; the lost ones are recorded Crashed."""
    adopted = None
    for fr in _active_flow_runs(RUN_TAG + run.output_dir):
        why = _lost(run, fr, stale)
        if why:
            _crash(fr["id"], f"lost: {why}")
            echo(f"lost earlier: {run.name} (flow run {fr['id']}: {why}); submitting it again")
        elif adopted is None:
            adopted = fr["id"]
    return adopted


def _flow_run_done(fid: str, run: SweepRun, sweep: Sweep, held: dict[str, SweepRun], failed: list[str],
                   echo: Callable[[str], Any]) -> bool:
    """Whether the flow run ``fid`` of ``run`` is no longer waited for: it ended (the run folder says
    whether the run finished; a failed one joins ``failed``), or it found another process training
    the run (which joins ``held``)."""
    stale = sweep.lock_stale_seconds
    fr = _api(f"/flow_runs/{fid}")
    kind = fr["state"]["type"]
    run_dir = run_path(run.output_dir)
    why = _lost(run, fr, stale)
    if why:
        _crash(fid, f"lost: {why}")
        kind, fr["state"]["message"] = "CRASHED", f"lost: {why}"
    if kind not in FINAL_STATES:
        if _reconcile(run, fr, stale):  # finished, and its process ended without saying so
            echo(f"finished: {run.name} (flow run {fid} ended without reporting it; now recorded Completed)")
            return True
        return False
    msg = _first_line(fr)
    if is_finished(run_dir, run.steps):  # the run folder decides, not the flow run's state
        if kind == "COMPLETED":
            echo(f"completed: {run.name}")
        else:
            was = _reconcile(run, fr, stale)
            echo(f"finished: {run.name} (its run folder says so; flow run {fid} ended {kind.lower()}"
                 + (f": {msg}" if msg else "") + ("; now recorded Completed" if was else "") + ")")
        return True
    info = lock_info(run_dir, stale)
    if info.state == "live" and not started_by(run_dir, fid):
        echo(f"held: {run.name} (flow run {fid} found another process training it: {info.holder_text}); "
             f"waiting for it")
        held[run.name] = run
        return True
    echo(f"{kind.lower()}: {run.name}" + (f" ({msg})" if msg and kind != "COMPLETED" else "")
         + (" (but its run folder is not finished)" if kind == "COMPLETED" else ""))
    failed.append(run.name)
    return True


def _held_run_done(run: SweepRun, sweep: Sweep, failed: list[str], echo: Callable[[str], Any]) -> bool:
    """Whether the process that held ``run`` let it go (a run it did not finish joins ``failed``)."""
    run_dir = run_path(run.output_dir)
    if lock_info(run_dir, sweep.lock_stale_seconds).state == "live":
        return False
    if is_finished(run_dir, run.steps):
        echo(f"finished: {run.name} (trained by another process)")
        _reconcile_finished(run, sweep, echo)  # that process may have been a flow run Prefect lost
    else:
        echo(f"stopped: {run.name} (the process that held it ended before finishing it)")
        failed.append(run.name)
    return True


def sweep_parameters(run: SweepRun, sweep: Sweep) -> dict[str, Any]:
    """The parameters of a run's flow (also what ``prefect deployment run --param`` would take)."""
    first = {"worker": run.worker} if run.stage == 2 else {"variant": run.variant}
    return {**first, "seed": run.seed, "overrides": run.overrides, "output_dir": run.output_dir,
            "total_timesteps": run.steps, "lock_stale_seconds": sweep.lock_stale_seconds}

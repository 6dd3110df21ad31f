"""Running a sweep (:mod:`rmtl.train.sweep_file`): each run kept in ``<output root>/<name>``, and
what makes running them idempotent and resumable.

Every run keeps its results (``keep_results: true`` unless the file says otherwise), so a re-run skips
finished runs and resumes unfinished ones from ``resume/``. :class:`RunLock` (host, pid and a
heartbeat in ``<run>/sweep.lock``) keeps a second process from training a run that a live
one is training; ``sweep_starts.jsonl`` in the run directory records every start. A run's
state is what its directory says (:func:`run_state`), never what a scheduler recorded about it.

Nothing here imports Prefect or torch.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from rmtl.errors import RmtlError
from rmtl.train.run.lock import DEFAULT_STALE_SECONDS, RunHeld, RunLock, lock_info
from rmtl.train.run.run_dir import CHECKPOINTS, LATEST, RESUME
from rmtl.train.run.run_dir import LOCK_FILE  # noqa: F401  (callers and tests take it from here too)
from rmtl.train.sweep_file import Sweep, SweepRun, stage1_run_config, stage2_run_config
from storage.lock import pid_alive

STARTS_FILE = "sweep_starts.jsonl"


# -- run state -----------------------------------------------------------------------------
def run_path(output_dir: str) -> Path:
    """A run's directory on this machine (``$RMTL_DATA_DIR/...`` expanded)."""
    from rmtl.provenance import expand_data_dir

    return expand_data_dir(output_dir).resolve()


def is_finished(run_dir: Path, steps: int) -> bool:
    """A kept run that trained ``steps`` env steps and was selected: ``summary.json`` and
    ``selection.json``, no ``resume/`` (a run without kept results: ``summary.json`` only)."""
    summary = run_dir / "summary.json"
    if not summary.is_file() or (run_dir / RESUME).exists():
        return False
    try:
        done = int(json.loads(summary.read_text()).get("env_steps", 0)) >= steps
    except (ValueError, OSError):
        return False
    kept = (run_dir / "validation.csv").is_file()
    return done and (not kept or (run_dir / "selection.json").is_file())


def run_state(run_dir: Path, steps: int) -> str:
    """'finished', 'resumable' (has ``resume/`` or a checkpoint) or 'new'."""
    if is_finished(run_dir, steps):
        return "finished"
    if (run_dir / RESUME).is_dir() or (run_dir / CHECKPOINTS / LATEST).is_file():
        return "resumable"
    return "new"


# -- training one run ----------------------------------------------------------------------
def train_run(variant: str, seed: int, overrides: Mapping[str, Any] | None = None, output_dir: str | None = None,
              steps: int | None = None, *, stale_seconds: float = DEFAULT_STALE_SECONDS,
              flow_run_id: str | None = None) -> dict[str, Any]:
    """Train one Stage-1 run as ``rmtl train stage1`` does (:func:`rmtl.train.cli.run_stage1`),
    unless it is finished; under its lock. Returns {run_dir, status ('finished' before,
    'trained'), env_steps}."""
    from rmtl.train.cli import run_stage1

    from rmtl.train.run.stdio import survive_closed_output

    cfg = stage1_run_config(variant, seed, overrides or {}, output_dir, steps)
    run_dir = cfg.run_dir()
    if is_finished(run_dir, cfg.total_timesteps):
        return {"run_dir": str(run_dir), "status": "finished", "env_steps": _env_steps(run_dir)}
    # a killed worker closes the pipe of our stdout: its last print must not fail a run that trained
    with survive_closed_output(), RunLock(run_dir, stale_seconds, flow_run_id=flow_run_id):
        from rmtl.train.run.run_dir import latest_checkpoint, resume_checkpoint

        ck = latest_checkpoint(run_dir) or resume_checkpoint(run_dir)
        try:  # a damaged meta.json: run_stage1 names it in one line (and how to go on), not a traceback here
            start = int(json.loads((ck / "meta.json").read_text()).get("num_timesteps", 0)) if ck else 0
        except (OSError, ValueError, TypeError, AttributeError):
            start = None
        _record_start(run_dir, flow_run_id, from_step=start)
        run_stage1(cfg)
    return {"run_dir": str(run_dir), "status": "trained", "env_steps": _env_steps(run_dir)}


def train_stage2_run(worker: str, seed: int, overrides: Mapping[str, Any] | None = None, output_dir: str | None = None,
                     steps: int | None = None, *, stale_seconds: float = DEFAULT_STALE_SECONDS,
                     flow_run_id: str | None = None) -> dict[str, Any]:
    """Train one Stage-2 run as ``rmtl train stage2`` does (:func:`rmtl.train.cli.run_stage2`), unless
    it is finished; under its lock. Resumes from the run directory's checkpoints. Returns {run_dir,
    status ('finished' before, 'trained'), env_steps}."""
    from rmtl.train.cli import run_stage2
    from rmtl.train.run.stdio import survive_closed_output

    cfg = stage2_run_config(worker, seed, overrides or {}, output_dir, steps)
    run_dir = cfg.run_dir()
    if is_finished(run_dir, cfg.total_timesteps):
        return {"run_dir": str(run_dir), "status": "finished", "env_steps": _env_steps(run_dir)}
    with survive_closed_output(), RunLock(run_dir, stale_seconds, flow_run_id=flow_run_id):
        _record_start(run_dir, flow_run_id, stage=2)
        run_stage2(cfg)
    return {"run_dir": str(run_dir), "status": "trained", "env_steps": _env_steps(run_dir)}


def train_sweep_run(run: SweepRun, *, stale_seconds: float = DEFAULT_STALE_SECONDS,
                    flow_run_id: str | None = None) -> dict[str, Any]:
    """Train one run of a sweep file, Stage 1 or Stage 2."""
    if run.stage == 2:
        return train_stage2_run(str(run.worker), run.seed, run.overrides, run.output_dir, run.steps,
                                stale_seconds=stale_seconds, flow_run_id=flow_run_id)
    return train_run(run.variant, run.seed, run.overrides, run.output_dir, run.steps, stale_seconds=stale_seconds,
                     flow_run_id=flow_run_id)


def _record_start(run_dir: Path, flow_run_id: str | None, **extra: Any) -> None:
    """Append who started a run when to ``sweep_starts.jsonl``: a run started twice at once shows there."""
    with open(run_dir / STARTS_FILE, "a") as f:
        f.write(json.dumps({"time": time.time(), "host": socket.gethostname(), "pid": os.getpid(),
                            "flow_run_id": flow_run_id, **extra}) + "\n")


def _env_steps(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "summary.json").read_text())["env_steps"])
    except (OSError, ValueError, KeyError):
        return 0


def run_starts(run_dir: Path) -> list[dict[str, Any]]:
    """The starts ``train_run`` recorded for a run, oldest first."""
    p = Path(run_dir) / STARTS_FILE
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.is_file() else []


def last_start(run_dir: Path) -> dict[str, Any]:
    """The newest start of a run (``{}``: none recorded, or an unreadable record)."""
    try:
        starts = run_starts(run_dir)
    except (OSError, ValueError):
        return {}
    return starts[-1] if starts and isinstance(starts[-1], dict) else {}


def started_by(run_dir: Path, flow_run_id: str) -> bool:
    """Whether flow run ``flow_run_id`` ever started training the run (a try refused by the lock did not)."""
    try:
        return any(s.get("flow_run_id") == flow_run_id for s in run_starts(run_dir))
    except (OSError, ValueError):
        return False


def process_gone(start: Mapping[str, Any], run_dir: Path, stale_seconds: float) -> bool:
    """Whether the process of a recorded start has ended: on this host by its pid; on another by the
    run's ``summary.json`` (written at its end) being older than ``stale_seconds``."""
    if start.get("host") == socket.gethostname():
        return not pid_alive(int(start.get("pid", -1)))
    try:
        return time.time() - (Path(run_dir) / "summary.json").stat().st_mtime > stale_seconds
    except OSError:
        return False


# -- the whole sweep -----------------------------------------------------------------------
def plan(sweep: Sweep) -> list[tuple[SweepRun, str]]:
    """Each run with its state: finished, resumable or new."""
    return [(r, run_state(run_path(r.output_dir), r.steps)) for r in sweep.runs]


def stage2_controls(sweep: Sweep) -> list[SweepRun]:
    """Each Stage-2 run's rule-continued control, in the Stage-2 runs' order: the first Stage-1 run
    warm-started (``init_policy``) from that run's worker. Empty unless every Stage-2 run has one (Fig. 7
    pairs them one to one)."""
    stage1 = [r for r in sweep.runs if r.stage == 1 and r.overrides.get("init_policy")]
    controls = []
    for s2 in (r for r in sweep.runs if r.stage == 2):
        worker = run_path(str(s2.worker))
        match = next((r for r in stage1 if r not in controls and run_path(str(r.overrides["init_policy"])) == worker),
                     None)
        if match is None:
            return []
        controls.append(match)
    return controls


def write_report(sweep: Sweep) -> Path:
    """The sweep's report in its report directory; returns the directory. Stage-2 runs: ``rmtl report
    --stage 2`` over them (Fig. 7 per worker and pooled, each with its rule-continued control where every
    run has one, on the test seeds); the other Stage-1 runs: ``rmtl report`` (Fig. 5/6 and the success
    table), in ``stage1/`` of it when the sweep also has Stage-2 runs."""
    from rmtl.train.cli import ReportConfig, report
    from rmtl.train.eval.selection import TEST_SEED

    out = run_path(sweep.report_dir)
    stage2 = [r for r in sweep.runs if r.stage == 2]
    controls = stage2_controls(sweep)
    stage1 = [r for r in sweep.runs if r.stage == 1 and r not in controls]
    if stage2:
        # Every arm on the episodes a Stage-1 run is tested on (its controls' count, else the default).
        episodes = min((stage1_run_config(r.variant, r.seed, r.overrides, r.output_dir, r.steps).test_episodes
                        for r in controls), default=ReportConfig.model_fields["test_episodes"].default)
        report(ReportConfig.make(runs=tuple(str(run_path(r.output_dir)) for r in stage2), stage=2,
                                 rule_continued=tuple(str(run_path(r.output_dir)) for r in controls),
                                 episodes=episodes, seed=TEST_SEED, out=str(out)))
    if stage1:
        kept = [stage1_run_config(r.variant, r.seed, r.overrides, r.output_dir, r.steps) for r in stage1]
        report(ReportConfig.make(runs=tuple(str(run_path(r.output_dir)) for r in stage1),
                                 out=str(out / "stage1" if stage2 else out),
                                 validation_episodes=min(c.validation_episodes for c in kept),
                                 test_episodes=min(c.test_episodes for c in kept)))
    return out


def run_local(sweep: Sweep, echo: Any = print) -> Path:
    """Every run of the sweep in order in this process (finished ones skipped), then the report.
    A run another live process trains (a worker of a pool sweep, another ``--local``) is skipped,
    not failed; the end names those runs, and the report waits until all of them are finished."""
    skipped: dict[str, str] = {}  # run name -> who holds it
    for r, state in plan(sweep):
        if state == "finished":
            echo(f"done: {r.name}")
            continue
        info = lock_info(run_path(r.output_dir), sweep.lock_stale_seconds)
        if info.state == "live":
            skipped[r.name] = info.holder_text
            echo(f"skipped: {r.name} (another process trains it: {skipped[r.name]})")
            continue
        echo(f"{'resuming' if state == 'resumable' else 'starting'}: {r.name}")
        try:
            train_sweep_run(r, stale_seconds=sweep.lock_stale_seconds)
        except RunHeld:  # taken between the look and the start
            skipped[r.name] = lock_info(run_path(r.output_dir), sweep.lock_stale_seconds).holder_text
            echo(f"skipped: {r.name} (another process trains it: {skipped[r.name]})")
    unfinished = [r.name for r, state in plan(sweep) if r.name in skipped and state != "finished"]
    if unfinished:
        raise RmtlError(f"{len(unfinished)} of {len(sweep.runs)} runs were skipped because another process holds "
                        f"them ({', '.join(f'{n}: {skipped[n]}' for n in unfinished)}); the others are done. Run the "
                        f"same sweep again once that process has finished them, to write the report")
    if skipped:
        echo(f"skipped here, finished by another process: {', '.join(skipped)}")
    return write_report(sweep)



"""Integration: a sweep through a real Prefect server (the session's), a process work pool of its
own and two workers, one of them SIGKILLed mid-run; a re-run started at once adopts the runs still
queued or running, resumes the lost one, and every run finishes exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import prefect_client_env
from flows.process_group import kill_group

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
from conftest import PROCESS_TAG_VAR as TAG_VAR  # noqa: E402
POOL = "rmtl-test-cpu"
RUNS = ("oracle_rmtl_s0", "oracle_rmtl_s1", "rule_only_s0", "rule_only_s1")
SWEEP = """
output_root: {root}
report: {report}
pool: {pool}
steps: 1024
lock_stale_seconds: 60
set: {{n_envs: 2, n_steps: 16, batch_size: 16, n_epochs: 2, checkpoint_every: 64, eval_every: 256,
      eval_episodes: 2, validation_episodes: 2, test_episodes: 2, torch_threads: 1, vec_env: dummy,
      env.max_episode_steps: 16}}
runs:
  - variants: [oracle_rmtl, rule_only]
    seeds: [0, 1]
"""


def _kill_worker_mid_run(runs: Path, workers: list[subprocess.Popen], timeout: float) -> tuple[str, int]:
    """Wait until some run has kept a checkpoint (``resume/``) and is still training, then SIGKILL
    the worker training it and everything it started. Returns (run name, worker pid)."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run in sorted(runs.glob("*_s*")):
            lock = run / "sweep.lock"
            if not ((run / "resume").is_dir() and lock.is_file() and not (run / "summary.json").exists()):
                continue
            try:
                trainer = psutil.Process(json.loads(lock.read_text())["pid"])
                ancestors = {p.pid for p in trainer.parents()}
            except (ValueError, KeyError, psutil.NoSuchProcess):
                continue
            worker = next((w for w in workers if w.pid in ancestors), None)
            if worker is None:
                continue
            family = psutil.Process(worker.pid).children(recursive=True)
            os.kill(worker.pid, signal.SIGKILL)  # the machine is gone: no chance to clean up
            for p in family:
                try:
                    p.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass
            worker.wait(10)
            return run.name, worker.pid
        time.sleep(0.1)
    raise AssertionError("no run reached a kept checkpoint while training")


def test_sweep_on_work_pool_survives_a_killed_worker(prefect_server, tmp_path, kill_tagged):
    from flows.local import api

    t0 = time.monotonic()
    tag = uuid.uuid4().hex
    runs, report = tmp_path / "runs", tmp_path / "report"
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(SWEEP.format(root=runs, report=report, pool=POOL))
    extra = {TAG_VAR: tag, "RMTL_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1", "MUJOCO_GL": "egl",
             "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
             "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "1"}
    server = prefect_server
    workers: list[subprocess.Popen] = []
    logs = []
    try:
        env = prefect_client_env(server, tmp_path / "prefect", **extra)
        for i in range(2):
            log = open(tmp_path / f"worker{i}.log", "ab")
            logs.append(log)
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--type", "process", "--limit", "1",
                 "--name", f"worker{i}"], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True))
        sweep_cmd = [sys.executable, "-m", "rmtl", "sweep", str(sweep_file), "--poll", "1"]
        first = subprocess.Popen(sweep_cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, start_new_session=True)
        killed, killed_pid = _kill_worker_mid_run(runs, workers, timeout=240)
        t_kill = time.monotonic() - t0
        # re-run at once, while the first sweep still waits: it must adopt the queued and running
        # flow runs, not submit copies, and submit only the lost run again
        second = subprocess.run(sweep_cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        out2 = second.stdout + second.stderr
        assert second.returncode == 0, out2
        out1, _ = first.communicate(timeout=120)
        t_done = time.monotonic() - t0
        # the first sweep names the lost run; the others finished with the surviving worker
        assert first.returncode == 2, out1
        assert f"crashed: {killed}" in out1 and "did not finish" in out1 and "run the same sweep again" in out1, out1
        assert "already submitted:" in out2, out2
        for name in RUNS:
            submitted = any(ln.startswith(f"submitted: {name} ") for ln in out2.splitlines())
            assert submitted == (name == killed), out2  # the others were adopted or done, never submitted again
            run = runs / name
            assert (run / "summary.json").is_file() and (run / "selection.json").is_file(), name
            assert not (run / "resume").exists() and not (run / "sweep.lock").exists(), name
            starts = [json.loads(line) for line in (run / "sweep_starts.jsonl").read_text().splitlines()]
            resumes = sorted(p.name for p in run.glob("run_resume_*.json"))
            if name == killed:  # started once, resumed once from its kept checkpoint, never twice at once
                assert [s["from_step"] > 0 for s in starts] == [False, True], starts
                assert len(resumes) == 1 and (run / "run.json").is_file(), resumes
            else:
                assert len(starts) == 1 and starts[0]["from_step"] == 0 and not resumes, (name, starts, resumes)
            assert json.loads((run / "summary.json").read_text())["env_steps"] >= 1024
        # Prefect's record: one completed flow run per run; the killed one also one crashed
        for name in RUNS:
            frs = api(server.url, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": [f"rmtl-run:{runs / name}"]}}})
            states = sorted(fr["state"]["type"] for fr in frs)
            assert states == (["COMPLETED", "CRASHED"] if name == killed else ["COMPLETED"]), (name, states)
        third = subprocess.run(sweep_cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert third.returncode == 0 and third.stdout.count("done: ") == 4 and "submitted" not in third.stdout, third
        table = (report / "success_table.md").read_text()
        rows = [ln for ln in table.splitlines() if ln.startswith("| oracle_rmtl |") or ln.startswith("| rule_only |")]
        assert len(rows) == 4, table
        print(f"\ntimings: worker killed at {t_kill:.1f} s ({killed}), "
              f"re-run finished at {t_done:.1f} s, third run (all done) at {time.monotonic() - t0:.1f} s")
    finally:
        for w in workers:
            kill_group(w, timeout=10)
        for log in logs:
            log.close()
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running after shutdown: {leftovers}"

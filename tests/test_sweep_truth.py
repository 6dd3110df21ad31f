"""What a sweep tells is what the run folders say: a trainer outlives
its killed worker and the sweep reports its run finished; a Prefect server lost mid-sweep is named
with the way back, and the runs that finished meanwhile are recorded when the sweep runs again;
``--local`` beside a pool sweep skips the run a worker trains; ``--fresh`` honours the run lock.
Every case runs the real command as a subprocess and asserts its first line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import PROCESS_TAG_VAR, _kill_tagged, prefect_client_env
from flows.prefect_settings import client_env, free_port, is_healthy
from flows.process_group import kill_group
from rmtl.train.sweep import LOCK_FILE, RunLock, is_finished, run_starts

ROOT = Path(__file__).resolve().parents[1]
TINY = ("{n_envs: 2, n_steps: 16, batch_size: 16, n_epochs: 1, checkpoint_every: 64, eval_every: 256, "
        "eval_episodes: 1, validation_episodes: 1, test_episodes: 1, torch_threads: 1, vec_env: dummy, "
        "env.max_episode_steps: 16}")


def _sweep_file(tmp: Path, pool: str, steps: tuple[int, ...]) -> Path:
    """A sweep of ``rule_only`` runs, seed i training ``steps[i]`` env steps."""
    groups = "".join(f"  - {{variants: [rule_only], seeds: [{i}], steps: {n}}}\n" for i, n in enumerate(steps))
    path = tmp / "sweep.yaml"
    path.write_text(f"output_root: {tmp / 'runs'}\nreport: {tmp / 'report'}\npool: {pool}\nlock_stale_seconds: 60\n"
                    f"set: {TINY}\nruns:\n{groups}")
    return path


def _env(tmp: Path, tag: str, **extra: str) -> dict[str, str]:
    return {**os.environ, PROCESS_TAG_VAR: tag, "RMTL_DATA_DIR": str(tmp / "data"), "HF_HUB_OFFLINE": "1",
            "MUJOCO_GL": "egl", "OMP_NUM_THREADS": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "1", **extra}


def _rmtl(env: dict, cwd: Path, *args: object, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rmtl", *map(str, args)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _popen_rmtl(env: dict, cwd: Path, *args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rmtl", *map(str, args)], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _first(text: str) -> str:
    return next((ln for ln in text.splitlines() if ln.strip()), "")


def _worker(env: dict, tmp: Path, pool: str, name: str) -> subprocess.Popen:
    log = open(tmp / f"{name}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process",
                             "--limit", "1", "--name", name], env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _trainer(run: Path, timeout: float, proc: subprocess.Popen | None = None) -> int:
    """The pid of the process holding ``run``'s lock, once one does (its trainer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(json.loads((run / LOCK_FILE).read_text())["pid"])
        except (OSError, ValueError, KeyError):
            pass
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the sweep ended before {run.name} started: {proc.communicate()}")
        time.sleep(0.1)
    raise AssertionError(f"no trainer took the lock of {run} within {timeout:.0f} s")


def _wait(what: str, ok, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def _flow_runs(url: str, run: Path) -> list[dict]:
    from flows.local import api

    return api(url, "/flow_runs/filter", {"flow_runs": {"tags": {"all_": [f"rmtl-run:{run}"]}}})


# -- no server -------------------------------------------------------------------------------
def test_a_trainer_survives_a_closed_stdout(tmp_path):
    """The worker reading a flow run's output dies: prints go nowhere, the trainer goes on."""
    code = ("import sys, time\n"
            "from rmtl.train.run.stdio import survive_closed_output\n"
            "time.sleep(0.5)\n"
            "with survive_closed_output():\n"
            "    for i in range(2000):\n"
            "        print('progress', i, flush=True); print('warning', i, file=sys.stderr)\n"
            f"open({str(tmp_path / 'done')!r}, 'w').write('ok')\n"
            "print('after the block')\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    p.stdout.close()  # the reader is gone before the first print
    p.stderr.close()
    assert p.wait(60) == 0 and (tmp_path / "done").read_text() == "ok"


TRAIN = ["train", "stage1", "--variant", "rule_only", "--steps", "64", "--no-progress", "--set", "n_envs=2",
         "--set", "n_steps=16", "--set", "batch_size=16", "--set", "n_epochs=1", "--set", "eval_episodes=1",
         "--set", "env.max_episode_steps=16", "--set", "vec_env=dummy", "--set", "torch_threads=1"]


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "start-or-resume"])
@pytest.mark.slow
def test_training_is_refused_while_a_live_process_holds_the_run(tmp_path, fresh):
    run = tmp_path / "run"
    run.mkdir()
    if fresh:
        (run / "summary.json").write_text("{}")  # an earlier run's file: --fresh would move it aside
    env = _env(tmp_path, uuid.uuid4().hex)
    with RunLock(run, stale_seconds=60):  # this process is the live trainer
        r = _rmtl(env, ROOT, *TRAIN, "--out", run, *(["--fresh"] if fresh else []), timeout=120)
        err = r.stderr.strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1, r.stderr[-2000:]
        assert _first(err).startswith(f"error: run {run} is being trained by {socket.gethostname()} pid {os.getpid()}")
        assert "not starting a second copy" in err and "Traceback" not in err
        # nothing moved aside, nothing trained
        assert sorted(p.name for p in run.iterdir()) == sorted(["summary.json", LOCK_FILE] if fresh else [LOCK_FILE])
        assert json.loads((run / LOCK_FILE).read_text())["pid"] == os.getpid()  # the holder's lock untouched


@pytest.mark.slow
def test_local_sweep_skips_a_run_another_process_holds_and_goes_on(tmp_path):
    path = _sweep_file(tmp_path, "rmtl", (64, 64))
    held, other = tmp_path / "runs" / "rule_only_s0", tmp_path / "runs" / "rule_only_s1"
    env = _env(tmp_path, uuid.uuid4().hex)
    with RunLock(held, stale_seconds=60):
        r = _rmtl(env, ROOT, "sweep", path, "--local")
    assert _first(r.stdout) == f"skipped: rule_only_s0 (another process trains it: {socket.gethostname()} pid {os.getpid()})"
    assert "starting: rule_only_s1" in r.stdout and is_finished(other, 64) and not run_starts(held)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, r.stderr[-2000:]
    assert err.startswith("error: 1 of 2 runs were skipped because another process holds them (rule_only_s0: "), err
    assert "run the same sweep again" in err.lower() and "failed" not in (r.stdout + err).lower()


# -- a real Prefect server and process workers ----------------------------------------------
@pytest.fixture(scope="module")
def prefect(prefect_server):
    """The session's Prefect server for the module's pool tests, and the tag of their processes
    (workers, sweeps, trainers), checked gone after the module."""
    tag = uuid.uuid4().hex
    yield prefect_server, tag
    left = _kill_tagged(tag)
    assert not left, f"processes left running: {left}"


@pytest.mark.slow
def test_a_worker_killed_alone_leaves_its_run_to_finish_and_the_sweep_says_so(prefect, tmp_path):
    """SIGKILL only the worker while its run trains: the trainer (a session of its own) lives on,
    survives its closed stdout and finishes; the sweep reports the run finished, exits 0 and writes
    the report, and so does the sweep run again."""
    import psutil

    server, tag = prefect
    env = prefect_client_env(server, tmp_path / "home", _env(tmp_path, tag))
    path = _sweep_file(tmp_path, "truth-kill", (512,))
    run = tmp_path / "runs" / "rule_only_s0"
    worker = _worker(env, tmp_path, "truth-kill", "w-kill")
    try:
        sweep = _popen_rmtl(env, tmp_path, "sweep", path, "--poll", "1")
        trainer = _trainer(run, 240, sweep)
        assert worker.pid in {p.pid for p in psutil.Process(trainer).parents()}
        os.kill(worker.pid, signal.SIGKILL)  # the worker alone: its flow run's trainer is not in its group
        worker.wait(10)
        out, err = sweep.communicate(timeout=300)
        print(f"\nsweep with its worker killed:\n{out}")
        assert sweep.returncode == 0, out + err
        assert _first(out).startswith("submitted: rule_only_s0 (new; flow run "), out
        assert "completed: rule_only_s0" in out or "finished: rule_only_s0" in out, out
        assert psutil.pid_exists(trainer) is False or psutil.Process(trainer).status() == psutil.STATUS_ZOMBIE
        assert is_finished(run, 512) and (tmp_path / "report" / "success_table.md").is_file()
        (fr,) = _flow_runs(server.url, run)
        # the trainer itself reported its end (its prints to the dead worker's pipe did not fail it)
        assert fr["state"]["type"] == "COMPLETED" and "rmtl sweep" not in (fr["state"].get("message") or ""), fr
        again = _rmtl(env, tmp_path, "sweep", path, "--poll", "1")
        assert again.returncode == 0 and _first(again.stdout) == "done: rule_only_s0", again.stdout + again.stderr
        assert "submitted" not in again.stdout and len(run_starts(run)) == 1
        dry = _rmtl(env, tmp_path, "sweep", path, "--dry-run")
        assert _first(dry.stdout).split() == ["finished", "rule_only_s0", "->", str(run)]
    finally:
        kill_group(worker, timeout=10)


@pytest.mark.slow
def test_local_beside_a_pool_sweep_skips_the_workers_run_and_neither_calls_the_other_failed(prefect, tmp_path):
    server, tag = prefect
    env = prefect_client_env(server, tmp_path / "home", _env(tmp_path, tag))
    path = _sweep_file(tmp_path, "truth-local", (1024, 64))
    runs = tmp_path / "runs"
    worker = _worker(env, tmp_path, "truth-local", "w-local")
    try:
        pool = _popen_rmtl(env, tmp_path, "sweep", path, "--poll", "1")
        trainer = _trainer(runs / "rule_only_s0", 240, pool)  # the worker trains s0; s1 waits in the queue
        local = _rmtl(env, tmp_path, "sweep", path, "--local")
        assert _first(local.stdout) == f"skipped: rule_only_s0 (another process trains it: {socket.gethostname()} " \
                                       f"pid {trainer})", local.stdout + local.stderr
        assert "starting: rule_only_s1" in local.stdout and is_finished(runs / "rule_only_s1", 64)
        if local.returncode != 0:  # s0 still training when --local ended: named, not failed
            assert local.returncode == 2 and _first(local.stderr).startswith(
                "error: 1 of 2 runs were skipped because another process holds them (rule_only_s0: "), local.stderr
        out, err = pool.communicate(timeout=400)
        print(f"\n--local:\n{local.stdout}{local.stderr}pool sweep:\n{out}")
        assert pool.returncode == 0, out + err
        assert not any(ln.split(":")[0] in ("failed", "crashed", "stopped") for ln in out.splitlines()), out
        assert "completed: rule_only_s0" in out, out
        # s1: its flow run found it finished, or found --local training it and waited for it
        assert any(ln.startswith(("completed: rule_only_s1", "finished: rule_only_s1 (trained by another process)"))
                   for ln in out.splitlines()), out
        for name in ("rule_only_s0", "rule_only_s1"):
            assert len(run_starts(runs / name)) == 1, name  # nobody trained a run twice
        assert (tmp_path / "report" / "success_table.md").is_file()
    finally:
        kill_group(worker, timeout=10)


@pytest.mark.slow
def test_a_server_lost_mid_sweep_is_named_and_the_rerun_after_a_restart_reconciles(tmp_path):
    """SIGTERM the server while a run trains: one line naming the API, the run that trains on and
    the way back. The trainer finishes without a server; after ``rmtl server start`` (same port and
    home) the same sweep records that run Completed, trains the other and writes the report."""
    tag = uuid.uuid4().hex
    home, port = tmp_path / "home", free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = client_env(url, home, _env(tmp_path, tag))
    start = ["server", "start", "--port", port, "--home", home, "--no-ui"]
    path = _sweep_file(tmp_path, "truth-server", (512, 64))
    runs = tmp_path / "runs"
    workers: list[subprocess.Popen] = []
    try:
        r = _rmtl(env, tmp_path, *start, timeout=300)
        assert r.returncode == 0 and is_healthy(url), r.stdout + r.stderr
        workers.append(_worker(env, tmp_path, "truth-server", "w-server-1"))
        sweep = _popen_rmtl(env, tmp_path, "sweep", path, "--poll", "1")
        trainer = _trainer(runs / "rule_only_s0", 240, sweep)
        import psutil

        server = next(p for p in psutil.process_iter(["cmdline"])
                      if "server" in (p.info["cmdline"] or []) and str(port) in (p.info["cmdline"] or [])
                      and "prefect" in " ".join(p.info["cmdline"]))
        os.killpg(os.getpgid(server.pid), signal.SIGTERM)
        out, err = sweep.communicate(timeout=180)
        line = _first(err)
        print(f"\nserver lost: {line}")
        assert sweep.returncode == 2 and len(err.strip().splitlines()) == 1, out + err
        assert line.startswith(f"error: the Prefect API at {url} stopped answering ("), line
        assert "1 run(s) train on without it (rule_only_s0)" in line and "1 wait until it answers again (rule_only_s1)" \
            in line and "rmtl server start" in line and "run the same sweep again" in line, line
        # the trainer finishes without a server and ends; nobody could record that in Prefect
        _wait("rule_only_s0 to finish without a server", lambda: is_finished(runs / "rule_only_s0", 512)
              and not (runs / "rule_only_s0" / LOCK_FILE).exists(), 240)
        _wait("the trainer to end", lambda: not psutil.pid_exists(trainer)
              or psutil.Process(trainer).status() == psutil.STATUS_ZOMBIE, 240)
        _wait("the server to stop", lambda: not is_healthy(url), 30)
        r = _rmtl(env, tmp_path, *start, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        workers.append(_worker(env, tmp_path, "truth-server", "w-server-2"))  # the first may have given up
        again = _rmtl(env, tmp_path, "sweep", path, "--poll", "1")
        out = again.stdout
        assert again.returncode == 0, out + again.stderr
        print(f"rerun after the restart:\n{out}")
        assert _first(out) == "done: rule_only_s0", out
        assert "reconciled: rule_only_s0 (flow run " in out and "now recorded Completed" in out, out
        assert "already submitted: rule_only_s1" in out and "completed: rule_only_s1" in out, out
        for name in ("rule_only_s0", "rule_only_s1"):
            states = [fr["state"]["type"] for fr in _flow_runs(url, runs / name)]
            assert states == ["COMPLETED"] and len(run_starts(runs / name)) == 1, (name, states)
        assert (tmp_path / "report" / "success_table.md").is_file()
    finally:
        for w in workers:
            kill_group(w, timeout=10)
        _rmtl(env, tmp_path, "server", "stop", timeout=60)
        left = _kill_tagged(tag)
    assert not left, f"processes left running: {left}"

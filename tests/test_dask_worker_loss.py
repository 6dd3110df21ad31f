"""``rmtl render-and-embed --dask-address`` when the cluster goes away or was never one, each
through the real command against a real ``dask scheduler`` and ``dask worker`` started here:

- the only worker SIGKILLed mid-render: one line saying it waits (at once), then one ``error:``
  line after the stated timeout (``--dask-worker-wait-s``), status 2, the store resumable: the same
  command with a live worker renders only the missing episodes;
- the same, with a worker started while it waits: it goes on and completes the store;
- the scheduler SIGKILLed mid-render: one line, status 2;
- an address Dask cannot use (``foo://bar:1``) or that answers with bytes that are not Dask's
  handshake (frame sizes of exabytes, a plausible header with garbage after it): one line each,
  status 2, within seconds;
- in-process (fast): the wait's lines and timeout, Dask's task errors as one line, the timeout's
  settings, addresses refused before any connection.
"""

from __future__ import annotations

import json
import os
import contextlib
import re
import signal
import struct
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace
from pathlib import Path

import pytest

from conftest import PROCESS_TAG_VAR as TAG_VAR
from conftest import command_env
from flows.process_group import kill_group

ROOT = Path(__file__).resolve().parents[1]
EPISODES = 24
"""Enough episodes (12 tasks of 2) that one worker is still rendering when the test kills it."""
WAIT_S = 6


def _env(tmp_path: Path, tag: str) -> dict[str, str]:
    env = command_env(tmp_path)
    env.update({TAG_VAR: tag, "OMP_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    env.pop("RMTL_DASK_WORKER_WAIT_S", None)
    return env


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _wait_for(what: str, check, timeout: float, logs: list[Path] = ()) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    tails = "".join(f"\n--- {p}\n{p.read_text(errors='replace')[-1500:]}" for p in logs if p.exists())
    raise AssertionError(f"timed out waiting for {what}{tails}")


def _scheduler(tmp_path: Path, env: dict) -> tuple[subprocess.Popen, str]:
    info, log = tmp_path / "scheduler.json", tmp_path / "scheduler.log"
    proc = _start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                   "--no-dashboard", "--scheduler-file", str(info)], env, log)
    address = _wait_for("the scheduler file", lambda: info.is_file() and json.loads(info.read_text() or "{}")
                        .get("address"), 120, [log])
    return proc, str(address)


def _worker(tmp_path: Path, env: dict, address: str, name: str) -> subprocess.Popen:
    """``dask worker`` with its nanny (as users start it), in a process group of its own."""
    log = tmp_path / f"{name}.log"
    proc = _start([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "1", "--nthreads", "1",
                   "--no-dashboard", "--name", name], env, log)
    _wait_for(f"worker {name} to register", lambda: "Registered to" in log.read_text(errors="replace")
              if log.exists() else False, 120, [log])
    return proc


def _sigkill_group(proc: subprocess.Popen) -> None:
    """The machine gone: SIGKILL the worker and its nanny at once (no restart, no goodbye)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _command(address: str, store: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rmtl", "render-and-embed", "--dask-address", address, "--episodes", str(EPISODES),
            "--views", "wide_view", "--resolution", "64", "--model", "rmtl-fetch-tiny@random", "--batch-size", "64",
            "--store", str(store), *extra]


def _episodes(store: Path) -> list[int]:
    """Episodes committed in ``store`` (read while the job writes it; [] before it exists)."""
    from storage.dataset import DatasetStore

    try:
        with DatasetStore.open(store, "r") as ds:
            return sorted(int(e) for e in ds.episodes())
    except Exception:  # noqa: BLE001 - not created yet, or created just now
        return []


def _mid_render(store: Path, job: subprocess.Popen) -> int:
    """Wait until some but not all episodes are committed; how many."""
    def some() -> int:
        assert job.poll() is None, f"the job ended (status {job.returncode}) before the test could kill a worker"
        n = len(_episodes(store))
        assert n < EPISODES, "every episode was rendered before the test could kill the worker"
        return n if n >= 2 else 0

    return int(_wait_for("the first episodes in the store", some, 300))


def _popen(cmd: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)


@contextlib.contextmanager
def _mid_render_on_one_worker(tmp_path: Path, kill_tagged, name: str, wait_s: float):
    """A scheduler, its one worker and render-and-embed into ``stores/<name>.zarr`` on them (waiting up
    to ``wait_s`` for a worker), entered mid-render (some but not all episodes committed). Yields what
    was started (``procs``: append what the test starts); at the end everything is killed and nothing
    the test tagged may be left running."""
    tag = uuid.uuid4().hex
    env = _env(tmp_path, tag)
    store = tmp_path / "stores" / f"{name}.zarr"
    procs: list[subprocess.Popen] = []
    try:
        sched, address = _scheduler(tmp_path, env)
        procs.append(sched)
        worker = _worker(tmp_path, env, address, "w0")
        procs.append(worker)
        job = _popen(_command(address, store, "--dask-worker-wait-s", str(wait_s)), env)
        procs.append(job)
        _mid_render(store, job)
        yield SimpleNamespace(env=env, store=store, address=address, scheduler=sched, worker=worker, job=job,
                              procs=procs)
    finally:
        for p in reversed(procs):
            kill_group(p, timeout=10)
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running: {leftovers}"


@pytest.mark.slow  # a real scheduler, workers, commands
def test_the_only_worker_killed_mid_render_gives_up_in_one_line_and_a_rerun_completes(tmp_path, kill_tagged):
    from storage.dataset import DatasetStore

    with _mid_render_on_one_worker(tmp_path, kill_tagged, "lost", WAIT_S) as c:
        env, store, address, job = c.env, c.store, c.address, c.job
        _sigkill_group(c.worker)
        t_kill = time.monotonic()
        first = job.stderr.readline().strip()
        t_first = time.monotonic() - t_kill
        rest = job.stderr.read()
        job.wait(60)
        t_end = time.monotonic() - t_kill
        print(f"\nwait line {t_first:.1f} s after the kill, gave up after {t_end:.1f} s: {first}\n{rest.strip()}")
        assert re.fullmatch(rf"waiting for a Dask worker: the scheduler at {re.escape(address)} has no worker left "
                            rf"\((\d+) of {EPISODES} episodes are in {re.escape(str(store))}\) \(up to {WAIT_S} s; "
                            rf"start one with `dask worker {re.escape(address)}`\)", first), (first, rest)
        assert t_first < 15, t_first  # said at once (the scheduler notices a killed worker in about a second)
        lines = [ln for ln in rest.splitlines() if ln.strip()]
        assert job.returncode == 2 and len(lines) == 1 and "Traceback" not in rest, (first, rest)
        kept = _episodes(store)
        assert 2 <= len(kept) < EPISODES
        assert lines[0] == (f"error: no Dask worker came back to the scheduler at {address} within {WAIT_S} s after its "
                            f"last one left; {len(kept)} of {EPISODES} episodes are in {store}; start workers there "
                            f"(`dask worker {address}`) and run the same command again to go on where it stopped, "
                            f"or leave out --dask-address to render with --workers local processes"), lines
        assert WAIT_S - 0.5 <= t_end - t_first <= WAIT_S + 20, (t_first, t_end)  # the stated timeout, not more
        # a worker again, the same command (default wait): only the missing episodes are rendered
        c.procs.append(_worker(tmp_path, env, address, "w1"))
        again = subprocess.run(_command(address, store), env=env, capture_output=True, text=True, timeout=600,
                               cwd=ROOT)
        assert again.returncode == 0, (again.stdout[-2000:], again.stderr[-2000:])
        summary = next(ln for ln in again.stdout.splitlines() if ln.startswith("store "))  # after progress lines
        assert summary.startswith(f"store {store}: ") and \
            f"({EPISODES - len(kept)} episodes rendered now)" in summary, again.stdout
        with DatasetStore.open(store) as ds:
            assert sorted(ds.episodes()) == list(range(EPISODES))
            assert ds.embedded_rows("rmtl-fetch-tiny__random") == ds.num_rows > 0


@pytest.mark.slow  # a real scheduler, workers, commands
def test_the_only_worker_killed_mid_render_goes_on_when_a_worker_joins(tmp_path, kill_tagged):
    from storage.dataset import DatasetStore

    with _mid_render_on_one_worker(tmp_path, kill_tagged, "back", 300) as c:
        env, store, address, job = c.env, c.store, c.address, c.job
        _sigkill_group(c.worker)
        first = job.stderr.readline().strip()
        assert first.startswith(f"waiting for a Dask worker: the scheduler at {address} has no worker left ("), first
        assert "(up to 300 s; " in first, first
        c.procs.append(_worker(tmp_path, env, address, "w1"))
        out, err = job.communicate(timeout=600)
        assert job.returncode == 0, (first, out[-2000:], err[-2000:])
        assert [ln for ln in err.splitlines() if ln.strip()] == [
            f"a Dask worker joined the scheduler at {address}; going on"], err
        with DatasetStore.open(store) as ds:
            assert sorted(ds.episodes()) == list(range(EPISODES))


@pytest.mark.slow  # a real scheduler, workers, commands
def test_the_scheduler_killed_mid_render_is_one_line(tmp_path, kill_tagged):
    with _mid_render_on_one_worker(tmp_path, kill_tagged, "nosched", WAIT_S) as c:
        store, address, job = c.store, c.address, c.job
        _sigkill_group(c.scheduler)
        t_kill = time.monotonic()
        out, err = job.communicate(timeout=120)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        print(f"\nafter {time.monotonic() - t_kill:.1f} s: {err.strip()}")
        assert job.returncode == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
        kept = len(_episodes(store))
        assert lines[0].startswith(f"error: lost the connection to the Dask scheduler at {address}; {kept} of "
                                   f"{EPISODES} episodes are in {store}; start it again"), lines


GARBAGE = {
    # a first uint64 of 16 and one frame whose size is 3 EiB: Dask's client allocated it (MemoryError)
    "exabyte frame": struct.pack("=QQQ", 16, 1, 3 << 60),
    # a plausible header (100 bytes, one frame) and then bytes that are not msgpack
    "plausible header": struct.pack("=QQQ", 100, 1, 84) + b"\xff" * 200,
    "text": b"garbage garbage garbage garbage\n",
}
_SERVER = """
import socket, sys, threading
payloads = [bytes.fromhex(h) for h in sys.argv[1:]]
socks = []
for _ in payloads:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks), flush=True)
def serve(s, data):
    while True:
        c, _ = s.accept()
        try:
            c.sendall(data)
        except OSError:
            pass
        threading.Timer(60, c.close).start()  # keep it open: a client waiting for more waits
for s, data in zip(socks, payloads):
    threading.Thread(target=serve, args=(s, data), daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.slow  # a real scheduler, workers, commands
def test_addresses_that_are_no_dask_scheduler_are_one_line(tmp_path, kill_tagged):
    tag = uuid.uuid4().hex
    env = _env(tmp_path, tag)
    server = subprocess.Popen([sys.executable, "-c", _SERVER, *(v.hex() for v in GARBAGE.values())], env=env,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ports = server.stdout.readline().split()
        assert len(ports) == len(GARBAGE), ports
        cases = {"unknown scheme": ("foo://bar:1", "error: --dask-address 'foo://bar:1' has an unknown scheme 'foo' "
                                                   "(Dask knows tcp://, ")}
        for (name, data), port in zip(GARBAGE.items(), ports):
            address = f"tcp://127.0.0.1:{port}"
            cases[name] = (address, f"error: {address} answers but is not a Dask scheduler (it sent "
                                    f"{data[:16]!r}")
        for name, (address, expected) in cases.items():
            t0 = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "rmtl", "render-and-embed", "--dask-address", address,
                                "--episodes", "1", "--store", str(tmp_path / "s.zarr")], env=env, capture_output=True,
                               text=True, timeout=120, cwd=tmp_path)
            took = time.monotonic() - t0
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, (name, r.stderr[-3000:])
            assert lines[0].startswith(expected), (name, lines[0])
            assert lines[0].endswith("fix --dask-address, or leave it out to render with --workers local processes") \
                or name == "unknown scheme", (name, lines[0])
            assert took < 60, (name, took)
            assert not (tmp_path / "s.zarr").exists()
            print(f"\n{name} ({took:.1f} s): {lines[0]}")
    finally:
        kill_group(server, timeout=10)
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running: {leftovers}"


# -- in-process: the pieces --------------------------------------------------------------------
class _Client:
    """What WorkerWait asks of a Dask client: its status and the scheduler's workers."""

    def __init__(self, workers: list[dict]):
        self.answers = workers
        self.status = "running"

    def nthreads(self) -> dict:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_worker_wait_says_once_goes_on_and_gives_up_after_its_timeout():
    from pipeline.jobs.dask_cluster import WorkerWait
    from rmtl.errors import ConfigError

    said: list[str] = []
    wait = WorkerWait(_Client([{}, {}, {"w": 1}, {}]), "tcp://h:1", 0.3, said.append,
                      progress=lambda: "3 of 8 episodes are in S")
    assert wait.poll() == 0 and wait.poll() == 0  # said once
    assert said == ["waiting for a Dask worker: the scheduler at tcp://h:1 has no worker left (3 of 8 episodes are in "
                    "S) (up to 0 s; start one with `dask worker tcp://h:1`)"]
    assert wait.poll() == 1 and said[-1] == "a Dask worker joined the scheduler at tcp://h:1; going on"
    assert wait.poll() == 0 and len(said) == 3  # a new wait, said again
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        while True:
            wait.poll()
            time.sleep(0.05)
    assert 0.25 <= time.monotonic() - t0 < 2
    assert str(err.value).startswith("no Dask worker came back to the scheduler at tcp://h:1 within 0 s after its last "
                                     "one left; 3 of 8 episodes are in S; start workers there")
    # the scheduler gone: one line
    gone = WorkerWait(_Client([OSError("Timed out trying to connect")]), "tcp://h:1", 5, said.append)
    with pytest.raises(ConfigError, match=r"^lost the connection to the Dask scheduler at tcp://h:1 \(OSError: Timed"):
        gone.poll()


def test_dask_task_errors_are_one_line_or_the_task_s_own():
    import asyncio

    from distributed.scheduler import KilledWorker

    from pipeline.jobs.dask_cluster import WorkerWait, task_lost

    watch = WorkerWait(_Client([{}]), "tcp://h:1", 5, lambda line: None, progress=lambda: "2 of 8 episodes are in S")
    from types import SimpleNamespace

    killed = task_lost(KilledWorker("rollout_episodes-1", SimpleNamespace(address="tcp://w:2"), 3), watch, [2, 3])
    assert str(killed).startswith("the Dask task rendering episodes [2, 3] killed the workers that ran it "
                                  "(KilledWorker: 4 workers died running it, the last tcp://w:2); ")
    assert "; 2 of 8 episodes are in S; look at those workers' logs" in str(killed)
    cancelled = task_lost(asyncio.CancelledError(), watch, [2, 3])
    assert str(cancelled).startswith("lost the connection to the Dask scheduler at tcp://h:1; 2 of 8 episodes are in S")
    assert task_lost(ZeroDivisionError("a bug"), watch, [2, 3]) is None  # re-raised as it is


def test_the_wait_s_settings(monkeypatch):
    from pipeline.jobs.dask_cluster import DASK_WORKER_WAIT_S, dask_worker_wait
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig
    from rmtl.errors import ConfigError

    monkeypatch.delenv("RMTL_DASK_WORKER_WAIT_S", raising=False)
    assert dask_worker_wait() == DASK_WORKER_WAIT_S == 120
    monkeypatch.setenv("RMTL_DASK_WORKER_WAIT_S", "7.5")
    assert dask_worker_wait() == 7.5 and dask_worker_wait(3) == 3  # the option wins
    for bad in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv("RMTL_DASK_WORKER_WAIT_S", bad)
        with pytest.raises(ConfigError, match="is not a positive number of seconds"):
            dask_worker_wait()
    assert RenderAndEmbedConfig.make(dask_worker_wait_s=4).dask_worker_wait_s == 4
    with pytest.raises(Exception, match="greater than 0"):
        RenderAndEmbedConfig.make(dask_worker_wait_s=0)


@pytest.mark.parametrize(("address", "line"), [
    ("foo://bar:1", "--dask-address 'foo://bar:1' has an unknown scheme 'foo' (Dask knows tcp://, tls://"),
    ("tcp://127.0.0.1", "--dask-address 'tcp://127.0.0.1' names no port; give tcp://HOST:PORT"),
    ("tcp://:8786", "--dask-address 'tcp://:8786' names no host; give tcp://HOST:PORT"),
], ids=["unknown scheme", "no port", "no host"])
def test_addresses_refused_before_any_connection(address, line):
    from pipeline.jobs.dask_cluster import check_scheduler
    from rmtl.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        check_scheduler(address)
    assert str(err.value).startswith(line), str(err.value)

"""``python -m flows.server``: a foreground ``run`` stops its server with it (SIGTERM, SIGKILL,
``stop``), ``status``/``stop`` find a server by its pid file and by its port, and a server on
every interface prints an address other machines can use. Real ``prefect server start``
subprocesses."""

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

from conftest import PROCESS_TAG_VAR as TAG_VAR
from flows.prefect_settings import free_port, port_in_use
from flows.process_group import kill_group
from flows.server import STATE_FILE, LocalServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path, tag: str) -> dict[str, str]:
    env = {**os.environ, TAG_VAR: tag, "RMTL_DATA_DIR": str(tmp_path / "data"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PREFECT_API_URL", None)
    return env


def _server_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "flows.server", *args]


def _start_run(args: list[str], env: dict, out: Path) -> subprocess.Popen:
    with open(out, "wb") as f:
        return subprocess.Popen(_server_cmd("run", *args), env=env, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT)


def _wait_ready(proc: subprocess.Popen, out: Path, timeout: float = 240) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = out.read_text(errors="replace").splitlines()
        if "ready" in lines:
            return lines
        assert proc.poll() is None, out.read_text(errors="replace")
        time.sleep(0.3)
    raise AssertionError(f"server not ready after {timeout:.0f} s: {out.read_text(errors='replace')}")


def _wait_port_free(port: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_in_use(port):
            return True
        time.sleep(0.2)
    return False


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(_server_cmd(*args), env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)


def _prefect_servers(tag: str) -> list[int]:
    """Pids of `prefect server start` processes this test started (by its environment tag)."""
    import psutil

    pids = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TAG_VAR) == tag and "prefect" in " ".join(p.cmdline()) and p.status() != "zombie":
                pids.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return pids


def test_run_stops_its_server_on_sigterm_and_status_finds_it(tmp_path, kill_tagged):
    tag = uuid.uuid4().hex
    env = _env(tmp_path, tag)
    home, port, out = tmp_path / "prefect", free_port(), tmp_path / "run.out"
    common = ["--port", str(port), "--home", str(home)]
    proc = _start_run([*common, "--host", "0.0.0.0", "--no-ui"], env, out)
    try:
        lines = _wait_ready(proc, out)
        assert lines[0].startswith(f"Prefect server on http://127.0.0.1:{port}/api (PREFECT_HOME {home}"), lines
        assert lines[1] == f"In other shells here: export PREFECT_API_URL=http://127.0.0.1:{port}/api PREFECT_HOME={home}"
        # on every interface: an address other machines can connect to, never 0.0.0.0
        assert lines[2].startswith("other machines: export PREFECT_API_URL=http://"), lines
        assert "0.0.0.0" not in lines[2] and "127.0.0.1" not in lines[2], lines[2]
        # recorded while it runs: status finds it by the pid file (no --port needed)
        st = _run(["status", "--home", str(home)], env)
        assert st.returncode == 0, st
        info = json.loads(st.stdout.splitlines()[0])
        assert info["recorded"] and info["healthy"] and info["url"] == f"http://127.0.0.1:{port}/api"
        assert info["foreground_pid"] == proc.pid
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert out.read_text().splitlines()[-1] == "stopping the Prefect server (SIGTERM)"
        assert _wait_port_free(port), "the server still holds the port after its parent was stopped"
        assert not (home / STATE_FILE).exists()
        st = _run(["status", *common], env)
        assert (st.returncode, st.stdout.splitlines()[0]) == (1, "no server running"), st
        assert not _prefect_servers(tag)
    finally:
        kill_group(proc, timeout=10)
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running: {leftovers}"


def test_run_killed_takes_its_server_and_stop_ends_a_run(tmp_path, kill_tagged):
    tag = uuid.uuid4().hex
    env = _env(tmp_path, tag)
    home, port = tmp_path / "prefect", free_port()
    common = ["--port", str(port), "--home", str(home)]
    proc = _start_run([*common, "--no-ui"], env, tmp_path / "run1.out")
    try:
        _wait_ready(proc, tmp_path / "run1.out")
        # `stop` ends a foreground run's server; the run then ends with status 0
        st = _run(["stop", "--home", str(home)], env)
        assert st.returncode == 0 and st.stdout.splitlines()[0].startswith(
            f"stopped the Prefect server at http://127.0.0.1:{port}/api (pid "), st
        assert proc.wait(60) == 0
        assert (tmp_path / "run1.out").read_text().splitlines()[-1] == \
            "the Prefect server was stopped (python -m flows.server stop)"
        assert _wait_port_free(port)
        # SIGKILL (no handler runs): the OS stops the server with its parent
        proc = _start_run([*common, "--no-ui"], env, tmp_path / "run2.out")
        _wait_ready(proc, tmp_path / "run2.out")
        proc.kill()
        proc.wait(10)
        assert _wait_port_free(port, 30), "the server outlived its SIGKILLed parent"
        st = _run(["status", *common], env)
        assert (st.returncode, st.stdout.splitlines()[0]) == (1, "no server running"), st
    finally:
        kill_group(proc, timeout=10)
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running: {leftovers}"


def test_status_and_stop_find_an_unrecorded_server_by_its_port(tmp_path, kill_tagged):
    """A server this project did not record (e.g. left by an older `run`): found by its port."""
    tag = uuid.uuid4().hex
    env = _env(tmp_path, tag)
    server = LocalServer(home=tmp_path / "elsewhere", log_file=tmp_path / "server.log", extra_env={TAG_VAR: tag})
    other_home = tmp_path / "prefect"
    try:
        server.start(timeout=240)
        st = _run(["status", "--port", str(server.port), "--home", str(other_home)], env)
        assert st.returncode == 0, st
        info = json.loads(st.stdout.splitlines()[0])
        assert (info["recorded"], info["pid"], info["url"]) == (False, server.proc.pid, server.url)
        # rmtl server status (no --port): the port of PREFECT_API_URL
        st = subprocess.run([sys.executable, "-m", "rmtl", "server", "status"], capture_output=True, text=True,
                            timeout=120, cwd=ROOT, env={**env, "PREFECT_API_URL": server.url,
                                                        "PREFECT_HOME": str(other_home)})
        assert st.returncode == 0 and st.stdout.splitlines()[0] == "{", st
        assert json.loads(st.stdout)["url"] == server.url
        st = _run(["stop", "--port", str(server.port), "--home", str(other_home)], env)
        assert st.returncode == 0, st
        assert st.stdout.splitlines()[0] == (f"stopped the Prefect server at {server.url} (pid {server.proc.pid}) "
                                             "(not recorded in PREFECT_HOME: found by its port)")
        assert _wait_port_free(server.port)
    finally:
        server.stop()
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running: {leftovers}"

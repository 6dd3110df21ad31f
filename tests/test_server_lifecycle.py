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


def _run(args: list[str], env: dict, entry: tuple[str, ...] = ("-m", "flows.server")) -> subprocess.CompletedProcess:
    """``python -m flows.server ARGS`` (or ``entry``: ``("-m", "rmtl", "server")``)."""
    return subprocess.run([sys.executable, *entry, *args], env=env, capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def _none_line(home: Path, port: int) -> str:
    return f"no server running (none recorded in PREFECT_HOME {home}, none answering on port {port})"


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
        assert (st.returncode, st.stdout.splitlines()[0]) == (1, _none_line(home, port)), st
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
        assert (st.returncode, st.stdout.splitlines()[0]) == (1, _none_line(home, port)), st
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
        assert st.returncode == 0 and len(st.stdout.splitlines()) == 1, st  # one line of JSON, as flows.server's
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


ENTRY_POINTS = {"rmtl server": ("-m", "rmtl", "server"), "python -m flows.server": ("-m", "flows.server")}


def _fake_server(home: Path) -> tuple[subprocess.Popen, object, str]:
    """A server as ``status``/``stop`` see one, without Prefect: an HTTP endpoint answering
    ``/api/health`` with 200, a process leading its own group, and the record ``start`` writes
    into ``home``; (process, HTTP server, API URL)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"true")

        def log_message(self, *args):
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{http.server_address[1]}/api"
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    home.mkdir(parents=True, exist_ok=True)
    (home / STATE_FILE).write_text(json.dumps({"pid": proc.pid, "url": url, "log": None, "home": str(home),
                                               "host": "127.0.0.1", "port": http.server_address[1]}))
    return proc, http, url


def test_status_and_stop_are_one_behaviour_in_both_entry_points(tmp_path):
    """``rmtl server status/stop`` and ``python -m flows.server status/stop``: the same lines and exit
    statuses (status with no server: 1), ``--port`` taken by both, an exported PREFECT_HOME honoured by
    both (``--home`` wins over it)."""
    port = free_port()
    base = {**_env(tmp_path, uuid.uuid4().hex), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    base.pop("PREFECT_HOME", None)
    data_home = tmp_path / "data" / "prefect"
    other = free_port()
    for name, entry in ENTRY_POINTS.items():
        # no server: where it looked (the data dir's home; the port of PREFECT_API_URL, or --port), status 1
        st = _run(["status"], base, entry)
        assert (st.returncode, st.stdout.strip(), st.stderr) == (1, _none_line(data_home, port), ""), (name, st)
        st = _run(["status", "--port", str(other)], base, entry)
        assert (st.returncode, st.stdout.strip()) == (1, _none_line(data_home, other)), (name, st)
        st = _run(["stop", "--port", str(other)], base, entry)  # nothing to stop is no error
        assert (st.returncode, st.stdout.strip(), st.stderr) == (0, _none_line(data_home, other), ""), (name, st)
        # a server recorded in an exported PREFECT_HOME: found there, and stopped
        home = tmp_path / f"home-{name.replace(' ', '_')}"
        proc, http, url = _fake_server(home)
        try:
            env = {**base, "PREFECT_HOME": str(home)}
            st = _run(["status"], env, entry)
            assert st.returncode == 0 and len(st.stdout.splitlines()) == 1, (name, st)
            info = json.loads(st.stdout)
            assert (info["recorded"], info["pid"], info["url"], info["home"]) == (True, proc.pid, url, str(home))
            st = _run(["status", "--home", str(tmp_path / "elsewhere")], env, entry)  # --home wins
            assert (st.returncode, st.stdout.strip()) == (1, _none_line(tmp_path / "elsewhere", port)), (name, st)
            st = _run(["stop"], env, entry)
            assert (st.returncode, st.stdout.strip()) == (0, f"stopped the Prefect server at {url} (pid {proc.pid})"), \
                (name, st)
            assert proc.wait(20) is not None and not (home / STATE_FILE).exists()
            st = _run(["status"], env, entry)
            assert (st.returncode, st.stdout.strip()) == (1, _none_line(home, port)), (name, st)
        finally:
            proc.kill()
            proc.wait(10)
            http.shutdown()

"""Start, check and stop a local Prefect server, and the settings every process needs.

The local server keeps its SQLite database and logs under ``PREFECT_HOME``, which lives
in the data directory (``<data dir>/prefect``) instead of ``~/.prefect``; analytics are
off (with no network the server otherwise dies in the background). Clients (a serve
process, ``prefect deployment run``, a flow called in-process) reach it through
``PREFECT_API_URL``. A remote Prefect API is the same ``PREFECT_API_URL`` pointing
elsewhere: nothing here is needed then.

Used by ``rmtl server ...``, ``python -m flows.server`` and the integration test. Nothing
here imports Prefect, so the helpers are cheap and settings are in place before it loads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Annotated, Any, Iterator, Literal, Mapping

import tyro

from rmtl.config import Config
from rmtl.config_cli import Command
from rmtl.errors import RmtlError
from rmtl.provenance import data_dir

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4200
STATE_FILE = "rmtl-server.json"
"""Written into PREFECT_HOME by a background server: pid, url, log path."""


class ServerError(RmtlError):
    """A local Prefect server that failed to start, or is not running."""


# -- settings ------------------------------------------------------------------------------
def prefect_home(data: str | Path | None = None) -> Path:
    """``PREFECT_HOME`` of this project: ``<data dir>/prefect``."""
    return data_dir(data) / "prefect"


def api_url(port: int, host: str = DEFAULT_HOST) -> str:
    return f"http://{host}:{port}/api"


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port nobody listens on right now (asked from the OS)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = DEFAULT_HOST) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def base_settings(home: str | Path | None = None) -> dict[str, str]:
    """Settings for any Prefect process of this project (server, serve, client, ephemeral)."""
    return {
        "PREFECT_HOME": str(Path(home) if home else prefect_home()),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # the first start of a server on a fresh SQLite database runs migrations, which
        # take longer than Prefect's default 20 s on a small machine
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    }


def client_env(url: str, home: str | Path | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a process that talks to the Prefect API at ``url``."""
    env = dict(os.environ if base is None else base)
    env.update(base_settings(home))
    env["PREFECT_API_URL"] = url
    return env


def is_healthy(url: str, timeout: float = 2.0) -> bool:
    """True when ``<url>/health`` answers 200 (``url`` is an API URL ending in /api)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(url: str, timeout: float = 180.0, proc: subprocess.Popen | None = None,
                 log: Path | None = None) -> None:
    """Wait for the API at ``url`` to answer; fail with one line (and the log's tail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_healthy(url):
            return
        if proc is not None and proc.poll() is not None:
            raise ServerError(f"Prefect server exited with code {proc.returncode} before it was healthy"
                              + _tail_hint(log))
        time.sleep(0.3)
    raise ServerError(f"Prefect server at {url} not healthy after {timeout:.0f} s" + _tail_hint(log))


def _tail_hint(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return f"; see {log} (last line: {lines[-1].strip()[:200]})" if lines else f"; see {log}"


# -- processes -----------------------------------------------------------------------------
def kill_group(proc_or_pid: subprocess.Popen | int, timeout: float = 10.0) -> None:
    """SIGTERM the process group led by a process started with ``start_new_session=True``,
    then SIGKILL it if it is still there after ``timeout`` seconds."""
    pid = proc_or_pid.pid if isinstance(proc_or_pid, subprocess.Popen) else int(proc_or_pid)
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if isinstance(proc_or_pid, subprocess.Popen):
            if proc_or_pid.poll() is not None and not _group_alive(pid):
                return
        elif not _group_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    if isinstance(proc_or_pid, subprocess.Popen):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc_or_pid.wait(5)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies of our own children count as gone once reaped; a group of only zombies is dead
    try:
        import psutil

        return any(p.status() != psutil.STATUS_ZOMBIE for p in psutil.process_iter()
                   if _safe_pgid(p.pid) == pgid)
    except ImportError:  # pragma: no cover - psutil comes with dask.distributed
        return True


def _safe_pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


class LocalServer:
    """A ``prefect server start`` subprocess (its own process group) on a loopback port.

    >>> with LocalServer() as server:          # doctest: +SKIP
    ...     subprocess.run([...], env=server.client_env())
    """

    def __init__(self, port: int | None = None, host: str = DEFAULT_HOST, home: str | Path | None = None,
                 ui: bool = False, log_file: str | Path | None = None, extra_env: Mapping[str, str] | None = None):
        self.host = host
        self.port = int(port) if port else free_port(host)
        self.home = Path(home) if home else prefect_home()
        self.ui = ui
        self.log_file = Path(log_file) if log_file else self.home / "logs" / f"server-{self.port}.log"
        self.extra_env = dict(extra_env or {})
        self.proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The API URL (what PREFECT_API_URL must be)."""
        return api_url(self.port, self.host)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "prefect", "server", "start", "--host", self.host, "--port", str(self.port),
                "--analytics-off", "--ui" if self.ui else "--no-ui"]

    def env(self) -> dict[str, str]:
        env = client_env(self.url, self.home)
        env.update({"PREFECT_SERVER_API_HOST": self.host, "PREFECT_SERVER_API_PORT": str(self.port),
                    "PREFECT_UI_ENABLED": "true" if self.ui else "false"})
        env.update(self.extra_env)
        return env

    def client_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for processes that use this server."""
        env = client_env(self.url, self.home, base)
        env.update(self.extra_env)
        return env

    def start(self, wait: bool = True, timeout: float = 180.0) -> LocalServer:
        if port_in_use(self.port, self.host):
            raise ServerError(f"port {self.port} on {self.host} is already in use; pick another with --port "
                              "(or use the server already there by setting PREFECT_API_URL)")
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(self.command(), env=self.env(), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        if wait:
            try:
                wait_healthy(self.url, timeout, self.proc, self.log_file)
            except BaseException:
                self.stop()
                raise
        return self

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is not None:
            kill_group(self.proc, timeout)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- a background server for users (rmtl server start/stop/status) --------------------------
def _state_path(home: Path) -> Path:
    return home / STATE_FILE


def server_status(home: str | Path | None = None) -> dict | None:
    """The background server recorded in PREFECT_HOME if its process is alive, else None."""
    home = Path(home) if home else prefect_home()
    path = _state_path(home)
    if not path.exists():
        return None
    info = json.loads(path.read_text())
    if not _group_alive(int(info["pid"])):
        path.unlink(missing_ok=True)
        return None
    info["healthy"] = is_healthy(info["url"])
    return info


def start_background(port: int = DEFAULT_PORT, host: str = DEFAULT_HOST, home: str | Path | None = None,
                     ui: bool = True, timeout: float = 180.0) -> dict:
    """Start a server that outlives this process; record it in ``PREFECT_HOME``. Returns
    {pid, url, log, home}. A server already recorded there is returned as is."""
    home = Path(home) if home else prefect_home()
    running = server_status(home)
    if running is not None:
        return running
    server = LocalServer(port, host, home, ui=ui)
    server.start(wait=False)
    assert server.proc is not None
    info = {"pid": server.proc.pid, "url": server.url, "log": str(server.log_file), "home": str(home)}
    _state_path(home).write_text(json.dumps(info))
    try:
        wait_healthy(server.url, timeout, server.proc, server.log_file)
    except BaseException:
        server.stop()
        _state_path(home).unlink(missing_ok=True)
        raise
    server.proc = None  # detach: stop_background() ends it
    if server._log is not None:
        server._log.close()
    return {**info, "healthy": True}


def stop_background(home: str | Path | None = None, timeout: float = 15.0) -> bool:
    """Stop the background server recorded in ``PREFECT_HOME``; False if none was running."""
    home = Path(home) if home else prefect_home()
    info = server_status(home)
    if info is None:
        return False
    kill_group(int(info["pid"]), timeout)
    _state_path(home).unlink(missing_ok=True)
    return True


def run_foreground(port: int = DEFAULT_PORT, host: str = DEFAULT_HOST, home: str | Path | None = None,
                   ui: bool = True) -> int:
    """Run a server in the foreground until Ctrl-C; returns its exit code."""
    server = LocalServer(port, host, home, ui=ui)
    print(f"Prefect server on {server.url} (PREFECT_HOME {server.home}, log {server.log_file}); Ctrl-C stops it.\n"
          f"In other shells: export PREFECT_API_URL={server.url} PREFECT_HOME={server.home}", flush=True)
    server.start(wait=False)
    assert server.proc is not None
    try:
        wait_healthy(server.url, 180, server.proc, server.log_file)
        print("ready", flush=True)
        return server.proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


@contextlib.contextmanager
def local_settings(home: str | Path | None = None) -> Iterator[str | None]:
    """Prefect settings for running flows in this process (a plain command).

    With ``PREFECT_API_URL`` set (env or profile) flows report to that API. Without it
    Prefect 3 starts a temporary server for the duration of the call; this puts its
    database under the data directory, turns analytics off and gives it time to migrate
    a fresh database. Yields the API URL in use (None: temporary server).
    """
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_HOME,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    updates: dict = {PREFECT_SERVER_ANALYTICS_ENABLED: False}
    if "PREFECT_HOME" not in os.environ or home is not None:
        home = Path(home) if home else prefect_home()
        home.mkdir(parents=True, exist_ok=True)  # Prefect creates only the last level
        updates[PREFECT_HOME] = str(home)
    url = PREFECT_API_URL.value()
    if not url:
        updates[PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS] = 180
    with temporary_settings(updates=updates):
        yield url or None


def stop_temporary_server() -> None:
    """Send the queued logs and events, then stop the temporary server Prefect started in
    this process for flows run without ``PREFECT_API_URL`` (otherwise it stops at exit).
    Stopping it before the queues are drained makes the exit hang on retries."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.server.api.server import SubprocessASGIServer

    if None not in SubprocessASGIServer._instances:
        return
    for worker in (APILogWorker, EventsWorker):
        try:
            worker.drain_all(timeout=10)
        except RuntimeError:  # never started
            pass
    SubprocessASGIServer().stop()


# -- commands ------------------------------------------------------------------------------
class ServerConfig(Config):
    """A local Prefect server: where it listens, its home, whether it serves the UI."""

    port: int = DEFAULT_PORT
    """Port on the host."""
    host: str = DEFAULT_HOST
    """Address to listen on."""
    home: str | None = None
    """PREFECT_HOME (default <data dir>/prefect)."""
    ui: bool = True
    """Serve the web UI."""


class ServerActionConfig(ServerConfig):
    """``python -m flows.server ACTION``."""

    action: Annotated[Literal["start", "stop", "status", "run"], tyro.conf.Positional]
    """start/stop/status: a background server recorded in PREFECT_HOME; run: in the foreground."""


def start(cfg: ServerConfig) -> None:
    """Start a background Prefect server and print the settings clients need."""
    info = start_background(cfg.port, cfg.host, cfg.home, ui=cfg.ui)
    print(f"Prefect server at {info['url']} (log {info['log']})\n"
          f"export PREFECT_API_URL={info['url']} PREFECT_HOME={info['home']}")


def stop(cfg: Any = None) -> None:
    """Stop the background Prefect server."""
    print("stopped" if stop_background() else "no server was running")


def status(cfg: Any = None) -> None:
    """Show the background Prefect server, if any."""
    info = server_status()
    print(json.dumps(info, indent=2) if info else "not running")


def server_action(cfg: ServerActionConfig) -> int:
    """Start, stop or show a local Prefect server, or run one in the foreground."""
    if cfg.action == "run":
        return run_foreground(cfg.port, cfg.host, cfg.home, ui=cfg.ui)
    if cfg.action == "start":
        info = start_background(cfg.port, cfg.host, cfg.home, ui=cfg.ui)
        print(f"Prefect server running: pid {info['pid']}, log {info['log']}\n"
              f"export PREFECT_API_URL={info['url']} PREFECT_HOME={info['home']}")
        return 0
    if cfg.action == "stop":
        print("stopped" if stop_background(cfg.home) else "no server running")
        return 0
    info = server_status(cfg.home)
    print("no server running" if info is None else json.dumps(info))
    return 0 if info is not None else 1


STANDALONE = Command("flows.server:ServerActionConfig", "flows.server:server_action",
                     "Start, stop or show a local Prefect server, or run one in the foreground.")
"""``python -m flows.server ACTION``."""


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.server ACTION [--port N] [--no-ui] ...``; returns the exit status (errors:
    one line, rmtl.console)."""
    from rmtl.config_cli import run_standalone

    return run_standalone(STANDALONE, argv, "python -m flows.server")


if __name__ == "__main__":
    from rmtl.console import finish

    finish(main())

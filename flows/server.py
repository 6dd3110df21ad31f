"""Start, check and stop a local Prefect server.

The local server keeps its SQLite database and logs under ``PREFECT_HOME``: ``--home``, else an
exported ``PREFECT_HOME``, else the data directory's (``<data dir>/prefect``), never ``~/.prefect``
by default (:func:`server_home`, one rule for every action of both entry points); analytics are
off (with no network the server otherwise dies in the background). Clients (a serve
process, ``prefect deployment run``, a flow called in-process) reach it through
``PREFECT_API_URL``. A remote Prefect API is the same ``PREFECT_API_URL`` pointing
elsewhere: nothing here is needed then.

Used by ``rmtl server ...`` and ``python -m flows.server`` (the same functions: same lines, same
exit statuses; ``status`` with no server exits 1) and the tests. The settings
and addresses are :mod:`flows.prefect_settings`'s, stopping process groups :mod:`flows.process_group`'s.
Nothing here imports Prefect, so the helpers are cheap and settings are in place before it loads.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Annotated, Any, Literal
from collections.abc import Mapping

import tyro
from pydantic import Field

from flows.prefect_settings import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    api_url,
    client_env,
    connect_host,
    free_port,
    is_healthy,
    port_in_use,
    prefect_home,
    remote_hint,
)
from flows.process_group import group_alive, kill_group, kill_tree, process_group_of, term_with_parent
from rmtl.config import Config
from rmtl.config_cli import Command
from rmtl.errors import RmtlError

STATE_FILE = "rmtl-server.json"
"""Written into PREFECT_HOME by a background server: pid, url, log path."""


class ServerError(RmtlError):
    """A local Prefect server that failed to start, or is not running."""


def server_home(home: str | Path | None = None) -> Path:
    """The PREFECT_HOME a server command uses: ``home`` (``--home``) when given, else an exported
    ``PREFECT_HOME`` (as every Prefect client in that shell uses), else ``<data dir>/prefect``."""
    if home:
        return Path(home).expanduser()
    exported = os.environ.get("PREFECT_HOME", "").strip()
    return Path(exported).expanduser() if exported else prefect_home()


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


class LocalServer:
    """A ``prefect server start`` subprocess (its own process group) on a loopback port.

    >>> with LocalServer() as server:          # doctest: +SKIP
    ...     subprocess.run([...], env=server.client_env())
    """

    def __init__(self, port: int | None = None, host: str = DEFAULT_HOST, home: str | Path | None = None,
                 ui: bool = False, log_file: str | Path | None = None, extra_env: Mapping[str, str] | None = None):
        self.host = host
        self.port = int(port) if port else free_port(host)
        self.home = server_home(home)
        self.ui = ui
        self.log_file = Path(log_file) if log_file else self.home / "logs" / f"server-{self.port}.log"
        self.extra_env = dict(extra_env or {})
        self.proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The API URL for clients on this machine (what PREFECT_API_URL must be here; loopback
        for a server on every interface: remote_hint() tells other machines theirs)."""
        return api_url(self.port, connect_host(self.host))

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

    def start(self, wait: bool = True, timeout: float = 180.0, die_with_parent: bool = False) -> LocalServer:
        """Start the server; ``die_with_parent``: the OS sends it SIGTERM when this process ends,
        however it ends (Linux; a foreground ``run`` that is SIGKILLed)."""
        if port_in_use(self.port, self.host):
            raise ServerError(f"port {self.port} on {self.host} is already in use; pick another with --port "
                              "(or use the server already there by setting PREFECT_API_URL)")
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(self.command(), env=self.env(), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=term_with_parent(os.getpid()) if die_with_parent else None)
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


def _read_state(home: Path) -> dict | None:
    try:
        info = json.loads(_state_path(home).read_text())
        int(info["pid"]), str(info["url"])
        return info
    except (OSError, ValueError, KeyError, TypeError):
        return None


def default_port() -> int:
    """The port ``status`` and ``stop`` look at without ``--port``: that of a loopback
    ``PREFECT_API_URL``, else DEFAULT_PORT."""
    from urllib.parse import urlsplit

    url = os.environ.get("PREFECT_API_URL") or ""
    try:
        parts = urlsplit(url)
        if parts.hostname in ("127.0.0.1", "localhost", "::1") and parts.port:
            return int(parts.port)
    except ValueError:
        pass
    return DEFAULT_PORT


def listener_pid(port: int) -> int | None:
    """The pid of a process of this user listening on TCP ``port`` (None: none seen)."""
    try:
        import psutil

        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return int(c.pid)
    except Exception:  # noqa: BLE001 - no psutil, or psutil.AccessDenied (other users' sockets)
        pass
    return None


def _is_prefect_server(pid: int) -> bool:
    try:
        import psutil

        cmd = " ".join(psutil.Process(pid).cmdline())
    except Exception:  # noqa: BLE001 - gone, not ours, no psutil
        return False
    return "prefect" in cmd and ("server" in cmd or "uvicorn" in cmd)


def server_status(home: str | Path | None = None, port: int | None = None, by_port: bool = True) -> dict | None:
    """The server recorded in PREFECT_HOME (by ``start`` or a foreground ``run``) if its process
    is alive, else (``by_port``) a Prefect server answering on ``port`` of this machine (default
    :func:`default_port`; ``recorded``: False), else None."""
    home = server_home(home)
    info = _read_state(home)
    if info is not None:
        if group_alive(int(info["pid"])):
            info["healthy"] = is_healthy(info["url"])
            info.setdefault("recorded", True)
            return info
        _state_path(home).unlink(missing_ok=True)
    elif _state_path(home).exists():
        _state_path(home).unlink(missing_ok=True)  # a damaged record: the port decides
    if not by_port:
        return None
    port = default_port() if port is None else int(port)
    url = api_url(port)
    if not is_healthy(url):
        return None
    return {"pid": listener_pid(port), "url": url, "log": None, "home": None, "healthy": True, "recorded": False}


def _check_no_other_server(home: Path) -> None:
    info = server_status(home, by_port=False)
    if info is not None:
        raise ServerError(f"a Prefect server already runs for PREFECT_HOME {home} (pid {info['pid']}, {info['url']}); "
                          f"use it (export PREFECT_API_URL={info['url']}) or stop it first: python -m flows.server stop")


def start_background(port: int = DEFAULT_PORT, host: str = DEFAULT_HOST, home: str | Path | None = None,
                     ui: bool = True, timeout: float = 180.0) -> dict:
    """Start a server that outlives this process; record it in ``PREFECT_HOME``. Returns
    {pid, url, log, home}. A server already recorded there is returned as is."""
    home = server_home(home)
    running = server_status(home, by_port=False)
    if running is not None:
        return running
    server = LocalServer(port, host, home, ui=ui)
    server.start(wait=False)
    assert server.proc is not None
    info = {"pid": server.proc.pid, "url": server.url, "log": str(server.log_file), "home": str(home),
            "host": host, "port": server.port}
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


def stop_background(home: str | Path | None = None, timeout: float = 15.0, port: int | None = None) -> dict | None:
    """Stop the server recorded in ``PREFECT_HOME``, else a Prefect server of this user answering
    on ``port``; returns what was stopped (None: nothing was running). One line (ServerError)
    for a server on the port whose process is not this user's or not a Prefect server."""
    home = server_home(home)
    info = server_status(home, port)
    if info is None:
        return None
    pid = info.get("pid")
    if not info.get("recorded", True):
        if pid is None or not _is_prefect_server(int(pid)):
            raise ServerError(f"a Prefect server answers at {info['url']} but it was not started here and its process "
                              f"is not visible to this user; stop it where it runs")
        if process_group_of(int(pid)) != int(pid):  # not a group leader: stop only the process (and its children)
            kill_tree(int(pid), timeout)
            return info
    if info.get("recorded", True):
        _state_path(home).unlink(missing_ok=True)  # first: a foreground `run` then knows it was stopped on purpose
    kill_group(int(pid), timeout)
    return info


class _Stopped(Exception):
    """SIGTERM or SIGHUP reached a foreground server's parent."""


def run_foreground(port: int = DEFAULT_PORT, host: str = DEFAULT_HOST, home: str | Path | None = None,
                   ui: bool = True) -> int:
    """Run a server in the foreground until Ctrl-C, SIGTERM or SIGHUP, each of which stops the
    server (SIGTERM to its process group, SIGKILL after 15 s) before this returns; the server is
    recorded in PREFECT_HOME meanwhile, so ``status`` and ``stop`` find it. Returns its exit code
    (0 after a stop)."""
    server = LocalServer(port, host, home, ui=ui)
    _check_no_other_server(server.home)
    hint = remote_hint(server.port, host)
    print(f"Prefect server on {server.url} (PREFECT_HOME {server.home}, log {server.log_file}); Ctrl-C stops it.\n"
          f"In other shells here: export PREFECT_API_URL={server.url} PREFECT_HOME={server.home}"
          + (f"\n{hint}" if hint else ""), flush=True)

    def stop_on(signum: int, frame: Any) -> None:
        raise _Stopped(signal.Signals(signum).name)

    handlers = {}
    if threading_main():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            handlers[sig] = signal.signal(sig, stop_on)
    try:
        server.start(wait=False, die_with_parent=True)
        assert server.proc is not None
        _state_path(server.home).write_text(json.dumps({
            "pid": server.proc.pid, "url": server.url, "log": str(server.log_file), "home": str(server.home),
            "host": host, "port": server.port, "foreground_pid": os.getpid()}))
        wait_healthy(server.url, 180, server.proc, server.log_file)
        print("ready", flush=True)
        code = server.proc.wait()
        info = _read_state(server.home)
        if info is None or info.get("foreground_pid") != os.getpid():
            print("the Prefect server was stopped (python -m flows.server stop)", flush=True)
            return 0
        print(f"the Prefect server exited with code {code}; see {server.log_file}", flush=True)
        return code if code > 0 else 128 - code
    except (KeyboardInterrupt, _Stopped) as e:
        why = "Ctrl-C" if isinstance(e, KeyboardInterrupt) else str(e)
        print(f"stopping the Prefect server ({why})", flush=True)
        return 0
    finally:
        # signals stay deferred while the server stops, so a second SIGTERM cannot leave it orphaned
        for sig in handlers:
            signal.signal(sig, signal.SIG_IGN)
        server.stop()
        info = _read_state(server.home)
        if info is not None and info.get("foreground_pid") == os.getpid():
            _state_path(server.home).unlink(missing_ok=True)
        for sig, old in handlers.items():
            signal.signal(sig, old)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


# -- commands ------------------------------------------------------------------------------
class ServerConfig(Config):
    """A local Prefect server: where it listens, its home, whether it serves the UI."""

    port: int = DEFAULT_PORT
    """Port on the host."""
    host: str = DEFAULT_HOST
    """Address to listen on."""
    home: str | None = None
    """PREFECT_HOME (default: an exported PREFECT_HOME, else <data dir>/prefect)."""
    ui: bool = True
    """Serve the web UI."""


class ServerLookupConfig(Config):
    """``rmtl server status`` / ``rmtl server stop``: which server they look for."""

    port: int | None = Field(None, ge=1, le=65535)
    """Port where a server not recorded in PREFECT_HOME is looked for (default: that of a loopback
    PREFECT_API_URL, else 4200)."""
    home: str | None = None
    """PREFECT_HOME (default: an exported PREFECT_HOME, else <data dir>/prefect)."""


class ServerActionConfig(ServerConfig):
    """``python -m flows.server ACTION``."""

    action: Annotated[Literal["start", "stop", "status", "run"], tyro.conf.Positional]
    """start/stop/status: a background server recorded in PREFECT_HOME; run: in the foreground."""
    port: int | None = Field(None, ge=1, le=65535)  # type: ignore[assignment]
    """Port on the host (start, run: default 4200); where stop and status look for a server not
    recorded in PREFECT_HOME (default: that of a loopback PREFECT_API_URL, else 4200)."""


def _started_lines(info: dict) -> str:
    hint = remote_hint(int(info["port"]), str(info["host"])) if info.get("host") and info.get("port") else None
    return f"export PREFECT_API_URL={info['url']} PREFECT_HOME={info['home']}" + (f"\n{hint}" if hint else "")


def start(cfg: ServerConfig) -> None:
    """Start a background Prefect server and print the settings clients need."""
    info = start_background(cfg.port or DEFAULT_PORT, cfg.host, cfg.home, ui=cfg.ui)
    print(f"Prefect server at {info['url']} (pid {info['pid']}, log {info['log']})\n{_started_lines(info)}")


def _none_line(home: str | Path | None, port: int | None) -> str:
    """What status and stop print when they find no server: where they looked."""
    return (f"no server running (none recorded in PREFECT_HOME {server_home(home)}, none answering on port "
            f"{default_port() if port is None else port})")


def _stopped_line(info: dict | None, home: str | Path | None = None, port: int | None = None) -> str:
    if info is None:
        return _none_line(home, port)
    how = "" if info.get("recorded", True) else " (not recorded in PREFECT_HOME: found by its port)"
    return f"stopped the Prefect server at {info['url']} (pid {info['pid']}){how}"


def stop(cfg: ServerLookupConfig | None = None) -> int:
    """Stop the background Prefect server (status 0, also when none runs)."""
    cfg = cfg or ServerLookupConfig()
    print(_stopped_line(stop_background(cfg.home, port=cfg.port), cfg.home, cfg.port))
    return 0


def status(cfg: ServerLookupConfig | None = None) -> int:
    """Show the Prefect server recorded in PREFECT_HOME, else one answering on the port (one line of
    JSON); with none, say where it looked and exit with status 1."""
    cfg = cfg or ServerLookupConfig()
    info = server_status(cfg.home, cfg.port)
    print(_none_line(cfg.home, cfg.port) if info is None else json.dumps(info))
    return 0 if info is not None else 1


def server_action(cfg: ServerActionConfig) -> int:
    """Start, stop or show a local Prefect server, or run one in the foreground (the same
    commands as ``rmtl server start/stop/status``)."""
    if cfg.action == "run":
        return run_foreground(cfg.port or DEFAULT_PORT, cfg.host, cfg.home, ui=cfg.ui)
    if cfg.action == "start":
        start(cfg)
        return 0
    lookup = ServerLookupConfig(port=cfg.port, home=cfg.home)
    return stop(lookup) if cfg.action == "stop" else status(lookup)


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

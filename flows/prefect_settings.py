"""The settings every Prefect process of this project needs, and the addresses its clients use.

``PREFECT_HOME`` lives in the data directory (``<data dir>/prefect``) instead of ``~/.prefect``;
analytics are off (with no network a server otherwise dies in the background). Clients (a serve
process, ``prefect deployment run``, a flow called in-process) reach a server through
``PREFECT_API_URL``. Nothing here imports Prefect at module level, so settings are in place before
it loads.
"""

from __future__ import annotations

import contextlib
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path
from collections.abc import Iterator, Mapping

from rmtl.provenance import data_dir

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4200


def prefect_home(data: str | Path | None = None) -> Path:
    """``PREFECT_HOME`` of this project: ``<data dir>/prefect``."""
    return data_dir(data) / "prefect"


def api_url(port: int, host: str = DEFAULT_HOST) -> str:
    return f"http://{host}:{port}/api"


WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")
"""Listen addresses that mean "every interface": no client can connect to them as such."""


def connect_host(host: str) -> str:
    """The address a client on this machine uses for a server listening on ``host``."""
    return "127.0.0.1" if host in WILDCARD_HOSTS else host


def reachable_host() -> str | None:
    """This machine's non-loopback IPv4 address (the one its default route uses), or None when
    it has none. Asks the OS only: connecting a UDP socket sends nothing."""
    candidates = []
    with contextlib.suppress(OSError):
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as s:
            s.connect(("10.254.254.254", 1))
            candidates.append(s.getsockname()[0])
    with contextlib.suppress(OSError):
        candidates.append(socket.gethostbyname(socket.gethostname()))
    return next((ip for ip in candidates if ip and not ip.startswith("127.") and ip != "0.0.0.0"), None)


def remote_hint(port: int, host: str) -> str | None:
    """The line telling other machines which PREFECT_API_URL to use, for a server listening on
    every interface (None for a loopback or named host: the URL printed already is the one)."""
    if host not in WILDCARD_HOSTS:
        return None
    ip = reachable_host()
    if ip is None:
        return (f"other machines: export PREFECT_API_URL={api_url(port, 'HOST')} with HOST replaced by this "
                f"machine's address on their network (none found here besides loopback); PREFECT_HOME is theirs")
    return (f"other machines: export PREFECT_API_URL={api_url(port, ip)} (this machine's address on its default "
            f"route; use another of its addresses if they reach it by one) and a PREFECT_HOME of their own")


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port nobody listens on right now (asked from the OS)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = DEFAULT_HOST) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(0.5)
        return s.connect_ex((connect_host(host), port)) == 0


def base_settings(home: str | Path | None = None) -> dict[str, str]:
    """Settings for any Prefect process of this project (server, serve, client, ephemeral)."""
    return {
        "PREFECT_HOME": str(Path(home) if home else prefect_home()),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # the first start of a server on a fresh SQLite database runs migrations, which
        # take longer than Prefect's default 20 s on a small machine
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        # a server streams flow-run logs to `prefect deployment run --watch` only with these on:
        # without them --watch shows state changes alone, never a failure's one-line reason
        "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "true",
        "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED": "true",
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


# -- flows run in this process -------------------------------------------------------------
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

"""A run's lock: ``<run>/sweep.lock`` says which process trains the run (host, pid, heartbeat), so a
sweep, a work-pool worker, ``--local`` and ``rmtl train`` never train one run twice.

Lives beside the run folder's other files (not in :mod:`rmtl.train.sweep`) because every writer of a
run takes it, the command line included; nothing here imports torch or Prefect.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmtl.errors import RmtlError
from rmtl.train.run.run_dir import LOCK_FILE
from storage.lock import pid_alive

DEFAULT_STALE_SECONDS = 180.0
"""A lock whose heartbeat is older than this counts as lost (its holder on another host died)."""
HEARTBEAT_SECONDS = 20.0


def _process_started(pid: int) -> float | None:
    """When process ``pid`` started; None when it is not alive (:func:`storage.lock.pid_alive`:
    a zombie, killed and not yet reaped, is dead though its pid still answers)."""
    if not pid_alive(pid):
        return None
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:
        return None


class RunHeld(RmtlError):
    """A run another live process trains (its lock): not an error of the run, a reason to skip it."""


@dataclass
class LockInfo:
    state: str
    """'free', 'live' or 'stale'."""
    holder: dict[str, Any]
    age: float
    """Seconds since the holder's last heartbeat."""

    @property
    def holder_text(self) -> str:
        """Who holds the lock, for a message: ``host pid N``."""
        return f"{self.holder.get('host', '?')} pid {self.holder.get('pid', '?')}"


def lock_info(run_dir: Path, stale_seconds: float = DEFAULT_STALE_SECONDS) -> LockInfo:
    """Who holds a run's lock. On this host a dead pid (a zombie too, or a reused pid) makes it stale at once;
    a holder on another host is stale when its heartbeat is older than ``stale_seconds``."""
    p = Path(run_dir) / LOCK_FILE
    try:
        holder = json.loads(p.read_text())
        age = time.time() - p.stat().st_mtime
    except (FileNotFoundError, NotADirectoryError):  # no lock; under a file (no run there either): none can be
        return LockInfo("free", {}, 0.0)
    except (ValueError, OSError):  # half written: its writer is about to finish it
        return LockInfo("live", {}, 0.0)
    if holder.get("host") == socket.gethostname():
        started = _process_started(int(holder.get("pid", -1)))
        alive = started is not None and abs(started - float(holder.get("pid_started", started))) < 1.0
        return LockInfo("live" if alive else "stale", holder, age)
    return LockInfo("live" if age < stale_seconds else "stale", holder, age)


class RunLock:
    """``<run>/sweep.lock``: this process trains the run. Created exclusively; a stale lock
    (:func:`lock_info`) is taken over; a heartbeat thread keeps its mtime fresh. Re-entrant within a
    process: a sweep holds the lock and calls the command's trainer, which takes it again (a no-op)."""

    def __init__(self, run_dir: Path, stale_seconds: float = DEFAULT_STALE_SECONDS, **record: Any):
        self.path = Path(run_dir) / LOCK_FILE
        self.stale_seconds = stale_seconds
        self.record = {"host": socket.gethostname(), "pid": os.getpid(),
                       "pid_started": _process_started(os.getpid()), "since": time.time(), **record}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nested = False
        self._made_dir = False

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(self.record, f)
        return True

    def acquire(self) -> None:
        # A run folder the lock made is removed again if nothing was written into it (a run refused
        # before its first file, e.g. a damaged --init-policy, leaves no empty --out behind).
        self._made_dir = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._create():
            return self._beat()
        info = lock_info(self.path.parent, self.stale_seconds)
        if info.state == "live" and self._is_mine(info.holder):
            self._nested = True  # the outer holder (this process) keeps the lock and its heartbeat
            return None
        if info.state == "stale":
            self.path.unlink(missing_ok=True)
            if self._create():  # two takers of one stale lock: only one creates the new file
                return self._beat()
            info = lock_info(self.path.parent, self.stale_seconds)
        raise RunHeld(f"run {self.path.parent} is being trained by {info.holder_text} "
                        f"(heartbeat {info.age:.0f} s ago); not starting a second copy. If that process is gone, "
                        f"its lock goes stale after {self.stale_seconds:.0f} s, or delete {self.path}")

    def _is_mine(self, holder: dict[str, Any]) -> bool:
        return (holder.get("host"), holder.get("pid"), holder.get("pid_started")) == (
            self.record["host"], self.record["pid"], self.record["pid_started"])

    def _beat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_SECONDS):
                with contextlib.suppress(OSError):
                    os.utime(self.path)

        self._thread = threading.Thread(target=beat, name="sweep-lock-heartbeat", daemon=True)
        self._thread.start()

    def release(self) -> None:
        if self._nested:
            return
        self._stop.set()
        try:
            if json.loads(self.path.read_text()).get("pid") == os.getpid():
                self.path.unlink()
        except (OSError, ValueError):
            pass
        if self._made_dir:
            with contextlib.suppress(OSError):  # not empty (the run wrote), or gone: left as it is
                self.path.parent.rmdir()

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

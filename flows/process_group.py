"""Processes started in a process group of their own (``start_new_session=True``): stopping the
group, whether it is alive, and a child that dies with its parent."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any


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
            if proc_or_pid.poll() is not None and not group_alive(pid):
                return
        elif not group_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    if isinstance(proc_or_pid, subprocess.Popen):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc_or_pid.wait(5)


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie."""
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
                   if process_group_of(p.pid) == pgid)
    except ImportError:  # pragma: no cover - psutil comes with dask.distributed
        return True


def process_group_of(pid: int) -> int | None:
    """The process group of ``pid`` (None: gone, or not visible to this user)."""
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def term_with_parent(parent: int) -> Any:
    """A preexec_fn: SIGTERM to the child when its parent dies (Linux prctl PR_SET_PDEATHSIG); a
    no-op elsewhere."""
    def setup() -> None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return setup if sys.platform.startswith("linux") else None


def kill_tree(pid: int, timeout: float) -> None:
    """SIGTERM ``pid`` and its descendants (for a process that leads no group), SIGKILL those left after ``timeout``."""
    try:
        import psutil

        proc = psutil.Process(pid)
        family = [proc, *proc.children(recursive=True)]
    except Exception:  # noqa: BLE001
        return
    for p in family:
        with contextlib.suppress(Exception):
            p.terminate()
    _, alive = psutil.wait_procs(family, timeout=timeout)
    for p in alive:
        with contextlib.suppress(Exception):
            p.kill()

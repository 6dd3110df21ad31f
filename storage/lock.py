"""One writer per store: a lock object `<store>.lock` next to the store.

The lock records who holds it (pid, host, since, heartbeat, token). A lock whose pid is
no longer alive on this host, or whose heartbeat is older than the TTL (for writers on
other hosts), is stale and is taken over; anything else makes a second writer fail with
one line naming the holder and how to clear it. Locally the create is atomic (O_EXCL);
on fsspec object stores it is check-then-write and read back (best effort).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from storage.errors import StoreError
from storage.location import Location

DEFAULT_TTL_S = 6 * 3600.0
"""A lock with no heartbeat for this long is stale even if its pid cannot be checked."""
_UNREADABLE_GRACE_S = 30.0
"""An empty/garbled lock younger than this may be mid-write by its creator."""


@dataclass(frozen=True)
class LockInfo:
    pid: int
    host: str
    since: float
    heartbeat: float
    token: str

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"pid {self.pid} on host {self.host} since {since} (last heartbeat {time.time() - self.heartbeat:.0f} s ago)"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host. A killed process its parent has not reaped yet
    (a zombie) still answers ``kill(pid, 0)``; it counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed but unreaped child still answers kill(0); it is dead for us
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class WriterLock:
    """The writer lock of one store; `acquire()` it, `heartbeat()` while writing, `release()`."""

    def __init__(self, store: Location, ttl_s: float = DEFAULT_TTL_S):
        self.store = store
        self.loc = store.sibling(".lock")
        self.ttl_s = ttl_s
        self.info: LockInfo | None = None

    # -- reading -----------------------------------------------------------------------
    def holder(self) -> LockInfo | None:
        """The current holder, None when unlocked; raises ValueError if the lock is garbled."""
        try:
            raw = self.loc.read_bytes()
        except FileNotFoundError:
            return None
        return LockInfo(**json.loads(raw))

    def _is_stale(self, info: LockInfo) -> bool:
        if info.host == socket.gethostname() and not pid_alive(info.pid):
            return True
        return time.time() - info.heartbeat > self.ttl_s

    def _locked_error(self, info: LockInfo) -> StoreError:
        return StoreError(
            f"store {self.store} is locked by writer {info.describe()}; wait for it to finish, "
            f"or if that process is gone delete {self.loc} (or open with break_lock=True)"
        )

    def check_free(self) -> None:
        """Fail now, with the same line as `acquire`, if a live writer holds the lock (a
        check before long work; `acquire` still decides who gets it)."""
        try:
            held = self.holder()
        except (ValueError, TypeError):
            return
        if held is not None and not self._is_stale(held):
            raise self._locked_error(held)

    # -- writing -----------------------------------------------------------------------
    def _try_create(self, info: LockInfo) -> bool:
        data = json.dumps(asdict(info)).encode()
        if self.loc.is_local:
            os.makedirs(os.path.dirname(self.loc.path), exist_ok=True)
            try:
                fd = os.open(self.loc.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return True
        if self.loc.exists():
            return False
        self.loc.write_bytes(data)
        held = self.holder()
        return held is not None and held.token == info.token

    def _take_over(self, stale_token: str | None) -> bool:
        """Remove a stale lock, unless someone replaced it since we judged it stale."""
        if not self.loc.is_local:
            self.loc.remove()
            return True
        moved = f"{self.loc.path}.{uuid.uuid4().hex}.stale"
        try:
            os.rename(self.loc.path, moved)
        except FileNotFoundError:
            return True
        try:
            with open(moved, "rb") as f:
                token = json.loads(f.read()).get("token")
        except (OSError, ValueError, AttributeError):
            token = None
        if token != stale_token:
            # a racing writer took over first: put its lock back (link fails if taken again)
            try:
                os.link(moved, self.loc.path)
            except FileExistsError:
                pass
            os.unlink(moved)
            return False
        os.unlink(moved)
        return True

    def acquire(self, break_lock: bool = False) -> LockInfo:
        now = time.time()
        info = LockInfo(os.getpid(), socket.gethostname(), now, now, uuid.uuid4().hex)
        for _ in range(3):
            if self._try_create(info):
                self.info = info
                return info
            try:
                held = self.holder()
            except (ValueError, TypeError):
                held = None
                age = now - self.loc.fs.modified(self.loc.path).timestamp() if self.loc.exists() else 1e9
                if age < _UNREADABLE_GRACE_S and not break_lock:
                    raise StoreError(
                        f"store {self.store} has a lock being written right now ({self.loc}); retry in a few seconds"
                    ) from None
            if held is None or break_lock or self._is_stale(held):
                if not self._take_over(held.token if held else None) and held is not None:
                    raise self._locked_error(self.holder() or held)
                continue
            raise self._locked_error(held)
        raise StoreError(f"could not take the writer lock {self.loc} of store {self.store}; another writer keeps racing for it")

    def heartbeat(self) -> None:
        """Check we still hold the lock and refresh its heartbeat (called on every append)."""
        if self.info is None:
            raise StoreError(f"store {self.store} is not open for writing; open it with mode='a'")
        try:
            held = self.holder()
        except (ValueError, TypeError):
            held = None
        if held is None or held.token != self.info.token:
            who = held.describe() if held else "nobody (the lock file was removed)"
            raise StoreError(
                f"this writer lost the lock of store {self.store} to {who}; stop this writer, "
                f"the other one owns the store now"
            )
        self.info = LockInfo(**{**asdict(self.info), "heartbeat": time.time()})
        self.loc.write_bytes(json.dumps(asdict(self.info)).encode())

    def release(self) -> None:
        if self.info is None:
            return
        try:
            held = self.holder()
        except (ValueError, TypeError):
            held = None
        if held is not None and held.token == self.info.token:
            self.loc.remove()
        self.info = None

"""A Dask scheduler at an address (``--dask-address``): connecting to it and waiting for its
workers, each ending in one line (docs/errors.md, docs/flows.md "Server and flow failures").

- :func:`check_scheduler`: before anything loads, an address Dask cannot use (an unknown
  scheme, no host or port), nothing listening, or something that answers but is not a Dask
  scheduler (a web server, bytes that are not Dask's handshake) is one ``ConfigError`` line
  within seconds. Dask's own client would wait for a handshake without end, or parse garbage
  as frame sizes and try to allocate exabytes.
- :func:`connect_scheduler`: a ``Client``; whatever Dask raises while connecting is one line.
- :class:`WorkerWait`: every wait for a worker (at the start, and whenever the scheduler has
  none left while tasks are pending, e.g. its only worker was killed mid-render) says once that
  it waits (one line, through ``say``), goes on as soon as a worker joins, and gives up with one
  ``ConfigError`` line after the stated timeout (:func:`dask_worker_wait`). A scheduler that stops
  answering is one line too.

Nothing here imports Dask at module level.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from rmtl.errors import ConfigError

SCHEDULER_CONNECT_TIMEOUT_S = 5
"""Seconds a Dask scheduler address may take to accept a connection (and to send its handshake)
before it is named as unreachable (not a Dask scheduler)."""
DASK_WORKER_WAIT_S = 120.0
"""Seconds a job waits for a worker when the scheduler has none, at the start or after losing
them all (``RMTL_DASK_WORKER_WAIT_S`` or the ``dask_worker_wait_s`` option overrides it)."""
WAIT_ENV = "RMTL_DASK_WORKER_WAIT_S"
POLL_S = 1.0
"""Seconds between two questions to the scheduler while no result arrives."""
DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")
"""Address schemes of distributed's comm backends (others are asked from its registry)."""
_MAX_HANDSHAKE = 1 << 16
"""Bytes a Dask handshake message may take (a real one is ~60)."""
_FIX = ("start one there (`dask scheduler`, with workers: `dask worker ADDRESS`), fix --dask-address, "
        "or leave it out to render with --workers local processes")
_SCHEDULER_FIX = _FIX  # the earlier name


def dask_worker_wait(value: float | None = None) -> float:
    """Seconds to wait for a Dask worker: ``value`` (an option) if given, else
    ``RMTL_DASK_WORKER_WAIT_S``, else DASK_WORKER_WAIT_S; a bad environment value is one line."""
    if value is not None:
        return float(value)
    text = os.environ.get(WAIT_ENV, "").strip()
    if not text:
        return DASK_WORKER_WAIT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise ConfigError(f"{WAIT_ENV}={text!r} is not a positive number of seconds; set it to one "
                          f"(default {DASK_WORKER_WAIT_S:.0f}) or unset it")
    return seconds


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# -- the address ---------------------------------------------------------------------------------
def _scheme(address: str) -> str:
    return address.split("://", 1)[0].lower() if "://" in address else "tcp"


def _check_scheme(address: str, scheme: str) -> None:
    if scheme in DASK_SCHEMES:
        return
    try:
        from distributed.comm.registry import get_backend

        get_backend(scheme)  # a backend a plugin registered
        return
    except Exception:  # noqa: BLE001 - ValueError (unknown scheme), or the backend does not import
        pass
    raise ConfigError(f"--dask-address {address!r} has an unknown scheme {scheme!r} (Dask knows "
                      f"{', '.join(s + '://' for s in DASK_SCHEMES)}); give tcp://HOST:PORT (a Dask scheduler "
                      f"listens on 8786 by default), or leave it out to render with --workers local processes")


def _host_port(address: str, text: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text if "://" in text else f"tcp://{text}")
        host, port = parts.hostname, parts.port
    except ValueError as e:
        raise ConfigError(f"--dask-address {address!r} is not a scheduler address ({e}); give tcp://HOST:PORT, "
                          f"or leave it out to render with --workers local processes") from None
    if not host or port is None:
        raise ConfigError(f"--dask-address {address!r} names no {'port' if host else 'host'}; give tcp://HOST:PORT (a Dask "
                          f"scheduler listens on 8786 by default), or leave it out to render with --workers local "
                          f"processes")
    return host, port


def check_scheduler(address: str) -> None:
    """One ConfigError line, within seconds, when ``address`` is no Dask scheduler address (an
    unknown scheme, no host or port), when nothing accepts a TCP connection there, or (tcp://)
    when what answers does not send a Dask handshake: the message of a Dask listener's first
    frames, read whole with bounded sizes and decoded as msgpack. tls://, ws:// and wss:// get the
    connection check only; inproc:// and ucx:// are left to Dask (:func:`connect_scheduler`)."""
    import socket

    text = address.strip()
    scheme = _scheme(text)
    _check_scheme(address, scheme)
    if scheme in ("inproc", "ucx"):
        return
    host, port = _host_port(address, text)
    try:
        sock = socket.create_connection((host, port), timeout=SCHEDULER_CONNECT_TIMEOUT_S)
    except OSError as e:
        why = (f"no answer within {SCHEDULER_CONNECT_TIMEOUT_S} s" if isinstance(e, TimeoutError)
               else e.strerror or type(e).__name__)
        raise ConfigError(f"the Dask scheduler at {address} cannot be reached ({why}); {_FIX}") from None
    if scheme != "tcp":
        sock.close()
        return
    with sock:
        problem = _not_dask(sock)
    if problem is not None:  # Dask's own client would wait for its handshake without end, or parse garbage
        raise ConfigError(f"{address} answers but is not a Dask scheduler ({problem}); {_FIX}")


class _Closed(Exception):
    """The peer closed the connection before sending what was read for."""


def _not_dask(sock: Any) -> str | None:
    """What a connected peer sent instead of a Dask scheduler's handshake (None: it sent one).

    A Dask listener writes its handshake as soon as it accepts: ``<n bytes>`` (uint64), then n
    bytes holding ``<number of frames><frame sizes...>`` (uint64 each) and the frames, the first
    a msgpack map with ``compression``, ``python`` and ``pickle-protocol``. Every size is checked
    against a small bound before anything is read, so garbage is never taken for a frame size.
    A web server or another service sends nothing (it waits for a request), text or other bytes."""
    import struct

    deadline = time.monotonic() + SCHEDULER_CONNECT_TIMEOUT_S
    got = bytearray()

    def read(n: int) -> bytes:
        start = len(got)
        while len(got) - start < n:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            chunk = sock.recv(n - (len(got) - start))
            if not chunk:
                raise _Closed
            got.extend(chunk)
        return bytes(got[start:])

    def more(n: int) -> None:
        """Up to ``n`` more bytes where they came already (to show 16), not waiting for them."""
        with contextlib.suppress(OSError):
            sock.settimeout(0.2)
            got.extend(sock.recv(n))

    def shown() -> str:
        return repr(bytes(got[:16])) + ("..." if len(got) > 16 else "")

    try:
        (size,) = struct.unpack("=Q", read(8))
        if not 16 <= size <= _MAX_HANDSHAKE:
            more(8)
            return f"it sent {shown()}, not a Dask handshake"
        body = read(size)
        (n_frames,) = struct.unpack_from("=Q", body)
        if not 1 <= n_frames <= 64 or 8 * (1 + n_frames) > size:
            return f"it sent {shown()}, not a Dask handshake"
        lengths = struct.unpack_from(f"={n_frames}Q", body, 8)
        if sum(lengths) > _MAX_HANDSHAKE:
            return f"it sent {shown()}, not a Dask handshake"
        inline = body[8 * (1 + n_frames):]
        first = inline[:lengths[0]] if len(inline) >= lengths[0] else inline + read(lengths[0] - len(inline))
    except _Closed:
        return f"it closed the connection{_sent(bytes(got))} without a Dask handshake"
    except TimeoutError:
        return f"no Dask handshake within {SCHEDULER_CONNECT_TIMEOUT_S} s{_sent(bytes(got))}"
    except OSError as e:
        return f"the connection failed: {e.strerror or type(e).__name__}"
    except struct.error:
        return f"it sent {shown()}, not a Dask handshake"
    try:
        import msgpack

        msg = msgpack.loads(first, raw=False, use_list=False, strict_map_key=False)
    except Exception:  # noqa: BLE001 - any decoding error: not Dask's
        msg = None
    if not (isinstance(msg, dict) and {"compression", "python"} <= set(msg)):
        return f"it sent {shown()}, not a Dask handshake"
    return None


def _sent(data: bytes) -> str:
    return f" after sending {data[:16]!r}" if data else ""


# -- the client ----------------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet_dask_client_logs() -> Iterator[None]:
    """Dask's client logs a lost scheduler on stderr (several lines, some with tracebacks) where
    this job says it in one line: its loggers are raised to CRITICAL meanwhile."""
    names = ("distributed.client", "distributed.core", "distributed.comm", "distributed.batched")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _why(err: BaseException) -> str:
    try:
        text = " ".join(str(err).split())
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails
        text = ""
    return f"{type(err).__name__}: {text[:200]}" if text else type(err).__name__


def connect_scheduler(address: str) -> Any:
    """A Dask ``Client`` of the scheduler at ``address``; one ConfigError line when it cannot be
    reached or what answers is not one (whatever Dask raises while connecting)."""
    from distributed import Client

    try:
        return Client(address, timeout=SCHEDULER_CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"the Dask scheduler at {address} cannot be reached ({type(e).__name__}); "
                          f"{_FIX}") from None
    except Exception as e:  # noqa: BLE001 - an unknown scheme, a reply Dask cannot parse, a backend missing
        raise ConfigError(f"cannot connect to a Dask scheduler at {address} ({_why(e)}); {_FIX}") from None


@contextlib.contextmanager
def scheduler_client(address: str) -> Iterator[Any]:
    """:func:`check_scheduler`, then a client of the scheduler at ``address`` (closed after, quietly,
    also when the scheduler is gone), with Dask's client logs quiet meanwhile."""
    check_scheduler(address)
    with _quiet_dask_client_logs():
        client = connect_scheduler(address)
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                client.close(timeout=SCHEDULER_CONNECT_TIMEOUT_S)


def scheduler_lost(address: str, err: BaseException | None, progress: str = "") -> ConfigError:
    """The one line for a scheduler that stopped answering while a job used it."""
    why = f" ({_why(err)})" if err is not None else ""
    rest = f"; {progress}" if progress else ""
    return ConfigError(f"lost the connection to the Dask scheduler at {address}{why}{rest}; start it again (`dask "
                       f"scheduler`, with workers: `dask worker ADDRESS`) and run the same command again, or leave "
                       f"out --dask-address to render with --workers local processes")


def task_lost(err: BaseException, watch: WorkerWait | None, episodes: Any = None) -> ConfigError | None:
    """The one line for a Dask task that did not end by itself (None: its own error, re-raised):
    it killed every worker it ran on (``KilledWorker``: a crash of the rollout, e.g. out of memory),
    or it was cancelled because the scheduler is gone."""
    import asyncio
    import concurrent.futures

    name = type(err).__name__
    address = watch.address if watch is not None else "its address"
    progress = watch.progress() if watch is not None else ""
    done = f"; {progress}" if progress else ""
    if name == "KilledWorker":
        tries = getattr(err, "allowed_failures", None)
        last = getattr(getattr(err, "last_worker", None), "address", None)
        why = (f"{tries + 1} workers died running it" if isinstance(tries, int) else "its workers died") \
            + (f", the last {last}" if last else "")
        return ConfigError(f"the Dask task rendering episodes {list(episodes or [])} killed the workers that ran it "
                           f"(KilledWorker: {why}){done}; look at those workers' logs (out of memory, a crash of "
                           f"MuJoCo or its GL library), then run the same command again to go on where it stopped")
    if isinstance(err, (asyncio.CancelledError, concurrent.futures.CancelledError)) or "Cancelled" in name:
        return scheduler_lost(address, None, progress)  # Dask cancels the futures of a client that lost it
    return None


class WorkerWait:
    """Waiting for a worker of the Dask scheduler at ``address``: :meth:`poll` is called while
    nothing arrives. When the scheduler has no worker it says so once (``say``: one line; default
    stderr), goes on when one joins (saying so), and raises one ConfigError line once none has
    come within ``timeout`` seconds. ``progress()`` describes what is done (put in both lines);
    ``start``: the wait before any work (no worker joined yet) rather than a worker lost."""

    def __init__(self, client: Any, address: str, timeout: float | None = None,
                 say: Callable[[str], Any] | None = None, progress: Callable[[], str] | None = None,
                 start: bool = False):
        self.client = client
        self.address = address
        self.timeout = dask_worker_wait(timeout)
        self.say = say or _stderr
        self.progress = progress or (lambda: "")
        self.start = start
        self.since: float | None = None

    def workers(self) -> int:
        """How many workers the scheduler has now (asked from it); one line when it no longer answers."""
        if self.client.status in ("closing", "closed"):
            raise scheduler_lost(self.address, None, self.progress())
        try:
            return len(self.client.nthreads())
        except Exception as e:  # noqa: BLE001 - OSError, CommClosedError, TimeoutError, CancelledError
            raise scheduler_lost(self.address, e, self.progress()) from None

    def alive(self) -> None:
        """A result arrived: a worker is there."""
        if self.since is not None:
            self.since = None
            self.say(f"a Dask worker joined the scheduler at {self.address}; going on")

    def poll(self) -> int:
        """The number of workers when there are some; says once that it waits when there are none,
        and raises once the wait has lasted ``timeout`` seconds."""
        n = self.workers()
        if n:
            self.alive()
            return n
        now = time.monotonic()
        if self.since is None:
            self.since = now
            self.say(self.waiting_line())
        elif now - self.since >= self.timeout:
            raise ConfigError(self.gave_up_line())
        return 0

    def wait(self) -> int:
        """Block until the scheduler has a worker (at once when it has); its number of workers."""
        while True:
            n = self.poll()
            if n:
                return n
            time.sleep(POLL_S / 2)

    def waiting_line(self) -> str:
        done = self.progress()
        what = "has none" if self.start else "has no worker left"
        return (f"waiting for a Dask worker: the scheduler at {self.address} {what}"
                + (f" ({done})" if done else "")
                + f" (up to {self.timeout:.0f} s; start one with `dask worker {self.address}`)")

    def gave_up_line(self) -> str:
        fix = (f"start workers there (`dask worker {self.address}`), or leave out --dask-address to render with "
               f"--workers local processes")
        if self.start:
            return f"no Dask worker joined the scheduler at {self.address} within {self.timeout:.0f} s; {fix}"
        done = self.progress()
        return (f"no Dask worker came back to the scheduler at {self.address} within {self.timeout:.0f} s after its "
                f"last one left" + (f"; {done}" if done else "")
                + f"; start workers there (`dask worker {self.address}`) and run the same command again to "
                  f"go on where it stopped, or leave out --dask-address to render with --workers local processes")


def wait_for_dask_workers(address: str, timeout: float | None = None, echo: Callable[[str], Any] | None = None) -> int:
    """The number of workers of the Dask scheduler at ``address`` once it has one: at once when it
    has, else after saying (one line, ``echo``; default stderr) that it waits for one; one
    ConfigError line when none joins within ``timeout`` seconds (default :func:`dask_worker_wait`)."""
    with scheduler_client(address) as client:
        return WorkerWait(client, address, timeout, echo, start=True).wait()

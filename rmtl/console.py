"""How every rmtl console command ends: one error path for the whole command line.

Every entry point (``rmtl ...``, ``python -m flows.serve``, ``python -m pipeline.train_vlm``,
...) runs through :func:`run_console`, which turns the way a command ended into an exit
status (docs/errors.md):

- success: 0 (or the status a command returned, or asked for with ``SystemExit``);
- a usage error (unknown command or option, a value of the wrong type: rmtl.config_cli), an invalid
  configuration value (pydantic), a project error (:data:`rmtl.errors.USER_ERRORS`) or an
  operating-system error on a path (permission denied, no space left): **one line** on
  stderr, ``error: <what is wrong>; <how to fix it>``, and status 2;
- Ctrl-C (SIGINT): the command stops cleanly (locks released, committed work kept), one
  line on stderr, status 130;
- anything else is a bug: Python's traceback and status 1. ``RMTL_DEBUG=1`` shows the
  traceback for every error.

It also holds the checks commands run before their work (:func:`check_output_dir`,
:func:`check_output_file`, :func:`check_store_path`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, NoReturn
from collections.abc import Callable

from rmtl.errors import USER_ERRORS, ConfigError
from rmtl.interrupts import Interrupted, interrupt_now

EXIT_OK = 0
EXIT_ERROR = 2
"""A usage, validation or project error (also what argparse and click use for usage errors)."""
EXIT_BUG = 1
EXIT_INTERRUPTED = 130
"""128 + SIGINT, the shell's convention for a command stopped by Ctrl-C."""

INTERRUPTED = "interrupted (Ctrl-C); what was committed before is kept: run the same command again to resume"


def one_line(text: object) -> str:
    """``text`` with all runs of whitespace (newlines included) collapsed to one space."""
    return " ".join(str(text).split())


def report(message: object) -> None:
    """Print ``error: <message>`` as one line on stderr."""
    print(f"error: {one_line(message)}", file=sys.stderr, flush=True)


def _quiet_exit() -> None:
    """Keep the exit after the error line quiet: a command stopped half-way (Ctrl-C, an
    error) can leave half-built objects whose finalisers fail, or background threads that
    warn or log, which would add lines after the one that says what happened. Only when
    the process is about to exit (process-wide settings)."""
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)  # e.g. asyncio's "Task was destroyed" for zarr's interrupted I/O
    sys.unraisablehook = lambda unraisable: None
    threading.excepthook = lambda args: None


def os_error_line(err: OSError) -> str:
    """One line for an operating-system error on a path."""
    what = err.strerror or type(err).__name__
    name = f" {err.filename}" if err.filename else ""
    other = f" -> {err.filename2}" if getattr(err, "filename2", None) else ""
    return f"cannot access{name}{other}: {what}; check the path, its permissions and the free space"


def _code_for(err: BaseException) -> int | None:
    """The exit status for an exception, printing its line; None for a bug (re-raise)."""
    if isinstance(err, USER_ERRORS):
        report(err)
        return EXIT_ERROR
    try:
        from pydantic import ValidationError
    except ImportError:  # pragma: no cover
        ValidationError = ()  # type: ignore[assignment]
    if ValidationError and isinstance(err, ValidationError):
        from rmtl.config import format_validation_error

        report(format_validation_error(err.title, err))
        return EXIT_ERROR
    if isinstance(err, OSError):
        if err.errno == errno.EPIPE:  # stdout closed by the reader (| head): nothing to say
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            return EXIT_BUG
        report(os_error_line(err))
        return EXIT_ERROR
    return None


_SIGINT_SEEN = threading.Event()


def _on_sigint(signum: int, frame: Any) -> None:
    _SIGINT_SEEN.set()
    if interrupt_now():  # else a deferred block (a GL call) raises it when it ends
        raise KeyboardInterrupt


@contextlib.contextmanager
def _watch_sigint():
    """Note that SIGINT arrived (then raise KeyboardInterrupt as Python does): libraries
    sometimes wrap the KeyboardInterrupt in their own error (ctypes, while MuJoCo renders,
    raises ``ArgumentError: argument 1: KeyboardInterrupt``), which must still end as an
    interruption. Only in the main thread, and only over Python's default handler."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _SIGINT_SEEN.clear()
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def exit_code(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Run ``fn`` and return the exit status for how it ended, printing the one error line.

    A return value that is an int is the status (argparse-style mains); anything else is 0.
    """
    debug = os.environ.get("RMTL_DEBUG", "").strip() not in ("", "0")
    try:
        with _watch_sigint():
            rv = fn(*args, **kwargs)
    except KeyboardInterrupt as e:
        if debug:
            raise
        _quiet_exit()  # before the line: leaving this block frees half-built objects (GL contexts) noisily
        report(str(e) if isinstance(e, Interrupted) and str(e) else INTERRUPTED)
        return EXIT_INTERRUPTED
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        report(e.code)
        return EXIT_ERROR
    except BaseException as e:
        if debug:
            raise
        if _SIGINT_SEEN.is_set():
            _quiet_exit()
            report(INTERRUPTED)  # a KeyboardInterrupt that a library wrapped in its own error
            return EXIT_INTERRUPTED
        code = _code_for(e)
        if code is None:
            raise
        return code
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else EXIT_OK


def finish(code: int) -> NoReturn:
    """Exit the process with ``code``: the last call of every console entry point.

    After Ctrl-C, CPython 3.11 may still end the process by SIGINT (status -2, not 130)
    when the KeyboardInterrupt passed through code that C extensions run during an
    import (it then sets a process-wide "unhandled KeyboardInterrupt" flag that a handled
    exception does not clear). So an interrupted command runs the atexit handlers, flushes
    stdio and exits with 130 directly; its ``with`` blocks (store locks) ran already."""
    if code in (EXIT_ERROR, EXIT_INTERRUPTED):
        _quiet_exit()
    if code == EXIT_INTERRUPTED:
        import atexit

        try:
            atexit._run_exitfuncs()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError, AttributeError):
                    pass
            os._exit(code)
    sys.exit(code)


def run_console(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> NoReturn:
    """``finish(exit_code(fn, ...))``: the way every console entry point ends."""
    finish(exit_code(fn, *args, **kwargs))


# ----------------------------------------------------------------------- output checks
def _probe(directory: Path) -> OSError | None:
    """Create and delete a file in ``directory``; the error if that fails."""
    try:
        fd, name = tempfile.mkstemp(prefix=".rmtl-write-check-", dir=directory)
    except OSError as e:
        return e
    os.close(fd)
    os.unlink(name)
    return None


def _first_existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _writable_dir(d: Path, what: str, p: Path) -> None:
    """``d`` is (or can be created as) a directory we write into, else a one-line ConfigError about ``what p``."""
    if d.exists():
        if not d.is_dir():
            raise ConfigError(f"{what} {p} cannot be written: {d} is a file, not a directory; choose another path")
        where = d
    else:
        where = _first_existing(d.parent)
        if not where.is_dir():
            raise ConfigError(f"{what} {p} cannot be created: {where} is a file, not a directory; choose another path")
    err = _probe(where)
    if err is not None:
        raise ConfigError(f"{what} {p} cannot be written: creating a file in {where} fails "
                          f"({err.strerror or err}); choose a writable location")


def check_output_dir(path: str | os.PathLike[str], what: str = "output directory") -> Path:
    """Check now, before any work, that ``path`` is (or can be created as) a directory this
    process can write into; raises :class:`ConfigError` naming the path and the problem.
    Nothing is created."""
    p = Path(path).expanduser().absolute()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{what} {p} is a file, not a directory; pass a directory path")
    _writable_dir(p, what, p)
    return p


def check_output_file(path: str | os.PathLike[str], what: str = "output file") -> Path:
    """Like :func:`check_output_dir` for a file to be written at ``path``."""
    p = Path(path).expanduser().absolute()
    if p.is_dir():
        raise ConfigError(f"{what} {p} is a directory; pass a file path")
    _writable_dir(p.parent, what, p)
    return p


def check_store_path(store: str | os.PathLike[str], what: str = "store") -> None:
    """Check a dataset store path a command will create or write: a directory (existing or
    creatable) in a writable place (its lock file lives next to it). Object-store URLs are
    not checked here."""
    s = os.fspath(store)
    if "://" in s and not s.startswith("file://"):
        return
    p = Path(s.removeprefix("file://")).expanduser().absolute()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{what} {p} is a file, not a store directory; pass the path of a store (a directory) "
                          f"or of a new one")
    _writable_dir(p.parent, what, p)
    if p.exists():
        _writable_dir(p, what, p)


# ----------------------------------------------------------------------------- progress
PROGRESS_EVERY_S = 30.0
"""Seconds between progress lines when stdout is not a terminal (a log file, a pipe, a job)."""


class LineProgress:
    """rich.progress.Progress's ``add_task``/``advance`` for a log: a terminal's live bar
    would write only carriage returns, so every ``every`` seconds (and when a task ends) it
    prints one line per task: ``<name>: <done>/<total> (<pct>%), <rate>/s, ETA <s> s``."""

    def __init__(self, every: float = PROGRESS_EVERY_S, stream: Any = None, clock: Callable[[], float] | None = None):
        import time

        self.every = every
        self.stream = stream
        self.clock = clock or time.monotonic
        self.tasks: list[dict[str, Any]] = []
        self._last = self.clock()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, completed: float = 0) -> int:
        self.tasks.append({"name": description, "total": total, "done": completed, "start": completed,
                           "t0": self.clock(), "ended": False})
        return len(self.tasks) - 1

    def advance(self, task: int, advance: float = 1) -> None:
        t = self.tasks[task]
        t["done"] += advance
        now = self.clock()
        finished = t["total"] is not None and t["done"] >= t["total"] and not t["ended"]
        if finished or now - self._last >= self.every:
            self._last = now
            t["ended"] = t["ended"] or finished
            self._line(t, now)

    def _line(self, t: dict[str, Any], now: float) -> None:
        rate = (t["done"] - t["start"]) / max(now - t["t0"], 1e-9)
        text = f"{t['name']}: {t['done']:g}"
        if t["total"]:
            text += f"/{t['total']:g} ({100 * t['done'] / t['total']:.0f}%)"
        text += f", {rate:.3g}/s"
        if t["total"] and rate > 0 and t["done"] < t["total"]:
            text += f", ETA {(t['total'] - t['done']) / rate:.0f} s"
        print(text, file=self.stream or sys.stdout, flush=True)


def progress(enabled: bool = True, every: float = PROGRESS_EVERY_S) -> Any:
    """The progress display of long work (render, embed): rich's live bar on a terminal, a
    :class:`LineProgress` line every ``every`` seconds when stdout is not one, nothing when
    disabled. Both take ``add_task(name, total=, completed=)`` and ``advance(task, n)``."""
    if enabled and not sys.stdout.isatty():
        return LineProgress(every)
    from rich.progress import Progress

    return Progress(disable=not enabled)

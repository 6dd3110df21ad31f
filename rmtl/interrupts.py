"""Ctrl-C that never unwinds out of the middle of a GL call.

The console's SIGINT handler (:mod:`rmtl.console`) raises KeyboardInterrupt where the
main thread happens to be. Inside a MuJoCo render that is a ctypes callback in the
middle of a GL call, and unwinding from there while the EGL context is half-used has
been seen to crash the process (SIGSEGV) instead of ending it with status 130. Code that
must not be cut short wraps itself in :func:`deferred_sigint`: a SIGINT that arrives
inside is raised as KeyboardInterrupt when the outermost such block ends (a render
takes milliseconds). Under any other SIGINT handler (Python's default, a test runner's)
nothing changes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_depth = 0
_pending = False


@contextlib.contextmanager
def deferred_sigint() -> Iterator[None]:
    """Hold the console's KeyboardInterrupt until the block ends (main thread only)."""
    global _depth, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if _depth == 0 and _pending:  # reached only when the block ended without an error
        _pending = False
        raise KeyboardInterrupt


def interrupt_now() -> bool:
    """For a SIGINT handler: True to raise KeyboardInterrupt now, False when a deferred
    block will raise it at its end."""
    global _pending
    if _depth > 0:
        _pending = True
        return False
    return True


class Interrupted(KeyboardInterrupt):
    """Ctrl-C with the line that says what is true afterwards, for a command whose state after a
    stop differs from the usual one (committed work kept, the same command resumes): the console
    prints ``error: <message>`` instead of its default line."""

"""A trainer's output that survives its reader going away.

A Prefect process worker reads its flow runs' stdout and stderr through pipes, and starts each
flow run in a process session of its own: when the worker is killed, the trainer lives on, and
its next print would raise ``BrokenPipeError`` (Python ignores SIGPIPE) and fail a run that
trains on fine. :func:`survive_closed_output` keeps training going: from the first write that
finds the reader gone, that stream's file descriptor points at ``/dev/null``, so every later
write (ours, a logging handler's, C code's, the flush at exit) succeeds and nothing is lost
that anyone could have read.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from typing import Any, TextIO
from collections.abc import Iterator

_GONE = (errno.EPIPE, errno.EIO, errno.EBADF, errno.ECONNRESET)
"""Errors of a write whose reader is gone: a closed pipe or socket, a hung-up terminal, a closed descriptor."""


class SurvivingStream:
    """A text stream (``sys.stdout`` / ``sys.stderr``) whose writes never fail because its reader is gone."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.diverted = False
        """True once the reader was found gone (the output goes to /dev/null since)."""

    def _divert(self) -> None:
        self.diverted = True
        try:  # the same descriptor, now /dev/null: whoever else holds this stream writes safely too
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, self._stream.fileno())
            os.close(fd)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            self._stream = open(os.devnull, "w")  # closed, or no descriptor of its own: drop the text

    def _call(self, name: str, *args: Any) -> Any:
        for _ in range(2):
            try:
                return getattr(self._stream, name)(*args)
            except OSError as e:
                if e.errno not in _GONE:
                    raise
            except ValueError:  # "I/O operation on closed file"
                pass
            self._divert()
        return None

    def write(self, text: str) -> int:
        self._call("write", text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._call("flush")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def survive_closed_output() -> Iterator[None]:
    """Within the block, prints and progress on ``sys.stdout`` / ``sys.stderr`` survive a closed reader
    (a killed worker, ``| head``): the text goes nowhere, the caller goes on."""
    saved = sys.stdout, sys.stderr
    guards = [s if s is None or isinstance(s, SurvivingStream) else SurvivingStream(s) for s in saved]
    sys.stdout, sys.stderr = guards
    try:
        yield
    finally:
        for g in guards:
            if g is not None:
                g.flush()  # buffered text of a closed pipe is dropped here, not raised at exit
        sys.stdout, sys.stderr = saved

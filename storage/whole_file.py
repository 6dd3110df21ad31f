"""Writing a local file or folder whole: the bytes go to a temp file beside it, then one rename swaps
it in, so a reader, a crash or a second writer never sees half a file (the rename is atomic on POSIX
and on Windows within one directory); a folder is filled beside its place and renamed in the same way."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["dir_written_whole", "write_file_whole"]


def write_file_whole(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) in one step; makes its folder."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    staged = p.with_name(f".{p.name}.{uuid.uuid4().hex}.tmp")
    try:
        staged.write_bytes(data.encode() if isinstance(data, str) else data)
        os.replace(staged, p)
    finally:
        staged.unlink(missing_ok=True)


@contextmanager
def dir_written_whole(path: str | os.PathLike[str]) -> Iterator[Path]:
    """An empty folder beside ``path`` (``.<name>.writing``) to fill; when the block ends without an
    error it takes the place of ``path``, so ``path`` is the old folder or the whole new one, never a
    mix. On an error the staged folder is removed and ``path`` is left as it was. One writer per
    folder (a run's lock sees to it): the staged names are fixed, so a crash's leftovers are cleared
    by the next write instead of piling up, and an old folder a kill left moved aside
    (``.<name>.replaced``, no ``path``) is put back first."""
    p = Path(path)
    staged, aside = p.with_name(f".{p.name}.writing"), p.with_name(f".{p.name}.replaced")
    if aside.is_dir() and not p.exists():  # killed between the two renames below: the old folder comes back
        os.replace(aside, p)
    for leftover in (staged, aside):
        shutil.rmtree(leftover, ignore_errors=True)
    staged.mkdir(parents=True)
    try:
        yield staged
        try:
            if p.exists():  # a folder cannot be renamed over a non-empty one: move it aside first
                os.replace(p, aside)
            os.replace(staged, p)
        except BaseException:  # a failed rename or a Ctrl-C between the two: the old folder goes back
            if aside.is_dir() and not p.exists():
                os.replace(aside, p)
            raise
        shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(staged, ignore_errors=True)

"""Writing a local file whole: the bytes go to a temp file beside it, then one rename swaps it in,
so a reader, a crash or a second writer never sees half a file (the rename is atomic on POSIX and
on Windows within one directory)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

__all__ = ["write_file_whole"]


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

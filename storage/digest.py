"""A file's content digest: the stamp that ties a kept evaluation to the policy file it measured.

Content, not size and modification time: a clone, a copy or a sync gives every file a new time, and a
kept evaluation of the same weights must still be found; retrained weights under the same name must not.
"""

from __future__ import annotations

import hashlib
import os


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()

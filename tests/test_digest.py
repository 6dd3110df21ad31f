"""storage.digest: the content stamp of kept evaluations."""

from __future__ import annotations

import hashlib
import os

from storage.digest import file_sha256


def test_the_digest_follows_the_bytes_not_the_time(tmp_path):
    f = tmp_path / "model.zip"
    f.write_bytes(b"weights")
    first = file_sha256(f)
    assert first == hashlib.sha256(b"weights").hexdigest()
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    assert file_sha256(f) == first
    f.write_bytes(b"other weights")
    assert file_sha256(f) != first

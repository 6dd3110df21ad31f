"""Store addresses: a local path or an fsspec URL, and the small JSON files next to a store.

Local paths use zarr's LocalStore (atomic metadata writes via rename) and os-level
exclusive creates for the lock; other URLs go through fsspec (object stores write each
object in one PUT, which is what makes the commit record atomic there).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import fsspec

from storage.errors import StoreError

CLOUD_EXTRA = "pip install 'rmtl[cloud]'"
"""How to install the object-store backends rmtl is tested with (s3fs)."""
_EXTRA_PROTOCOLS = ("s3", "s3a")
"""URL schemes the ``cloud`` extra serves."""

# Listings are never cached: zarr's store and this module hold separate filesystem objects,
# so a cached listing in one would hide the objects the other just wrote (a new store, a
# new chunk) from `exists`, `ls` and `find`.
_STORAGE_OPTIONS = {"use_listings_cache": False}


def _filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path) of a URL; a missing backend or an unknown scheme is one
    StoreError line saying what to install (the endpoint and credentials come from the
    backend's usual settings: environment variables, config files, FSSPEC_<SCHEME>_<OPTION>)."""
    scheme = url.split("://", 1)[0]
    try:
        return fsspec.core.url_to_fs(url, **_STORAGE_OPTIONS)
    except ImportError as e:
        if scheme in _EXTRA_PROTOCOLS:
            raise StoreError(f"store address {url} needs the S3 backend (s3fs), which is not installed; install "
                             f"it with: {CLOUD_EXTRA}") from None
        raise StoreError(f"store address {url} needs an fsspec backend for {scheme}:// that is not installed "
                         f"({e}); install it, or use a local path or an s3:// URL ({CLOUD_EXTRA})") from None
    except ValueError as e:
        if "not known" in str(e):  # fsspec: 'Protocol not known: <scheme>'
            raise StoreError(f"store address {url} has an unknown scheme {scheme}://; use a local path or an "
                             f"s3:// URL ({CLOUD_EXTRA})") from None
        raise


class Location:
    """Where a store (or one of its sibling files) lives."""

    def __init__(self, address: str | os.PathLike[str]):
        s = os.fspath(address)
        if s.startswith("file://"):
            s = s[len("file://"):]
        self.is_local = "://" not in s
        if self.is_local:
            self.url = str(Path(s).expanduser().absolute())
            self.fs = fsspec.filesystem("file")
            self.path = self.url
        else:
            self.url = s.rstrip("/")
            self.fs, self.path = _filesystem(self.url)

    def __str__(self) -> str:
        return self.url

    def sibling(self, suffix: str) -> Location:
        """The address `<this><suffix>`, e.g. '<store>.lock' next to the store."""
        return Location(self.url + suffix)

    def child(self, name: str) -> Location:
        return Location(self.url.rstrip("/") + "/" + name)

    def zarr_store(self, read_only: bool):
        import zarr.storage

        if self.is_local:
            return zarr.storage.LocalStore(self.path, read_only=read_only)
        return zarr.storage.FsspecStore.from_url(self.url, storage_options=dict(_STORAGE_OPTIONS), read_only=read_only)

    def exists(self) -> bool:
        return self.fs.exists(self.path)

    def is_empty_dir(self) -> bool:
        if not self.fs.exists(self.path):
            return True
        return self.fs.isdir(self.path) and not self.fs.ls(self.path)

    def read_bytes(self) -> bytes:
        return self.fs.cat_file(self.path)

    def write_bytes(self, data: bytes) -> None:
        """Replace the object in one step: temp file + rename locally, one PUT elsewhere."""
        if self.is_local:
            p = Path(self.path)
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, p)
        else:
            self.fs.pipe_file(self.path, data)

    def read_json(self) -> Any:
        return json.loads(self.read_bytes())

    def write_json(self, obj: Any) -> None:
        self.write_bytes(json.dumps(obj, indent=1, sort_keys=True).encode())

    def remove(self) -> None:
        try:
            self.fs.rm_file(self.path)
        except FileNotFoundError:
            pass

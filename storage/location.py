"""Store addresses: a local path or an fsspec URL, and the small JSON files next to a store.

Local paths use zarr's LocalStore (atomic metadata writes via rename) and os-level
exclusive creates for the lock; other URLs go through fsspec (object stores write each
object in one PUT, which is what makes the commit record atomic there).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import fsspec

from storage.errors import StoreError
from storage.whole_file import write_file_whole

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
    options: dict[str, Any] = dict(_STORAGE_OPTIONS)
    if scheme in _EXTRA_PROTOCOLS:  # an endpoint that does not answer is named within seconds
        options["config_kwargs"] = {"connect_timeout": S3_CONNECT_TIMEOUT_S}
    try:
        return fsspec.core.url_to_fs(url, **options)
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


_REACHED: set[tuple[str, str]] = set()
"""(scheme, bucket) pairs this process has already reached (checked once each)."""
S3_CONNECT_TIMEOUT_S = 5
"""Seconds an S3 connection may take before the store is named as unreachable."""
_CREDENTIALS_HELP = ("credentials are found in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else ~/.aws/credentials "
                     "and ~/.aws/config (the profile in AWS_PROFILE, default 'default'); the endpoint of an "
                     "S3-compatible server in AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL")


def _access_problem(err: BaseException) -> str | None:
    """What an object-store error says about credentials or the connection, or None."""
    name = type(err).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return f"no usable credentials ({name}: {err})"
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError",
                "ClientConnectorError", "ServerDisconnectedError") or isinstance(err, (ConnectionError, TimeoutError)):
        return f"the endpoint cannot be reached ({name}: {' '.join(str(err).split())[:200]})"
    if isinstance(err, PermissionError) or name in ("ClientError", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return f"access was refused ({name}: {' '.join(str(err).split())[:200]})"
    return None


def _check_reachable(loc: Location) -> None:
    """One StoreError line naming the URL, before anything else touches it, when an s3:// store
    cannot be reached: no credentials, an endpoint that does not answer (within
    S3_CONNECT_TIMEOUT_S), access refused. Checked once per bucket per process."""
    scheme = loc.url.split("://", 1)[0]
    if scheme not in _EXTRA_PROTOCOLS:
        return
    bucket = loc.path.split("/", 1)[0]
    if (scheme, bucket) in _REACHED:
        return
    try:  # one attempt, no retries: an endpoint that refuses is named at once
        options = {**getattr(loc.fs, "storage_options", {}), "skip_instance_cache": True,
                   "config_kwargs": {"connect_timeout": S3_CONNECT_TIMEOUT_S, "retries": {"max_attempts": 1}}}
        probe = type(loc.fs)(**options)
        if hasattr(probe, "retries"):
            probe.retries = 1  # s3fs's own retry loop
        probe.exists(loc.path)
    except Exception as e:  # botocore's errors do not share a base class with the builtins
        problem = _access_problem(e)
        if problem is None:
            raise
        raise StoreError(f"cannot reach store {loc.url}: {problem}; {_CREDENTIALS_HELP}") from None
    _REACHED.add((scheme, bucket))


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
            _check_reachable(self)

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
            write_file_whole(self.path, data)
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

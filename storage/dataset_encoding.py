"""How the dataset store encodes what it writes: chunk codecs (zstd + a CRC-32C), the
integrity record, consolidated metadata and JSON attributes."""

from __future__ import annotations

import json
import warnings
from typing import Any

import zarr
from zarr.codecs import BloscCodec, Crc32cCodec

from storage.errors import StoreError

# zstd through blosc: fast enough to not slow rendering, and byte-shuffle helps the float arrays.
COMPRESSOR = BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")
# Then a CRC-32C of the compressed bytes (zarr's crc32c codec): a flipped or truncated chunk
# fails its checksum on read instead of decoding to garbage.
CODECS = (COMPRESSOR, Crc32cCodec())
INTEGRITY = {"checksum": "crc32c", "all_chunks_written": True}
"""Recorded as `rmtl.integrity` by create: every chunk carries a CRC-32C and every chunk of
the committed rows is written, even when it holds only fill values, so a missing chunk file
is damage (older stores have no such record: `verify` then checks what it can)."""
WRITE_ALL = {"write_empty_chunks": True}
"""Array config of stores with `INTEGRITY`: chunks holding only fill values are written too."""


def consolidate(store: Any) -> None:
    with warnings.catch_warnings():
        # zarr warns that consolidated metadata is not in the v3 spec yet; we want it anyway.
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(store)


def json_ok(name: str, value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as e:
        raise StoreError(f"{name} must be JSON-serialisable (plain dicts, lists, numbers, strings): {e}") from None

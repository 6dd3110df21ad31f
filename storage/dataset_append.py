"""Appending to a dataset store, for its single writer: batch checks and the commit protocol.

Commit protocol (why a killed writer never exposes half-written rows): an append resizes
the arrays, writes the new rows, re-consolidates the metadata, and only then rewrites the
root attribute `rmtl_commit` with the new row count. Each of those metadata writes replaces
one object atomically (temp file + rename locally, one PUT on object stores). Readers
only ever look at rows below the committed count; a resumed writer starts at the
committed count and overwrites whatever a killed writer left past it, so rows are never
duplicated and never read back as zeros. One writer per store (storage.lock).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

import numpy as np
import zarr

from storage.dataset_encoding import WRITE_ALL, consolidate
from storage.errors import StoreError
from storage.lock import WriterLock
from storage.schema import COMMIT_ATTR, FRAMES, FRAMES_DTYPE, ROW_FIELDS, STEP_DEFAULTS, STEP_FIELDS


class StoreAppend:
    """The writing part of :class:`storage.dataset.DatasetStore` (a mixin over its state:
    location, lock, arrays, commit counts, key spec)."""

    def _write_config(self) -> dict[str, Any] | None:
        return WRITE_ALL if (self._info.get("integrity") or {}).get("all_chunks_written") else None

    def _require_writer(self) -> WriterLock:
        if self._mode != "a" or self._lock is None:
            raise StoreError(f"{self._loc} is open read-only; open it with DatasetStore.open(path, mode='a') to write")
        return self._lock

    def _commit(self, rows: int, emb_rows: Mapping[str, int]) -> None:
        consolidate(self._zstore)
        root = zarr.open_group(self._zstore, mode="r+", use_consolidated=True)
        root.attrs[COMMIT_ATTR] = {"rows": int(rows), "embeddings": {k: int(v) for k, v in emb_rows.items()}}
        self._rows = int(rows)
        self._emb_rows = dict(emb_rows)

    def _check_batch(self, batch: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        shapes = self._shapes()
        if not self.has_actions and set(batch) & set(STEP_FIELDS):
            raise self._lacks_actions("take rows with actions")
        unknown = set(batch) - set(shapes)
        if unknown:
            extra = " (this store has no frames)" if FRAMES in unknown else ""
            raise StoreError(f"unknown fields {sorted(unknown)} in append{extra}; fields are {sorted(shapes)}")
        cols = dict(batch)
        if "key" not in cols and "state" in cols:
            if self._key_spec is None:
                raise StoreError(f"{self._loc} was opened without a key spec; pass 'key' in every append, or open "
                                 "the store with the task's key_spec")
            cols["key"] = self._key_spec.keys(cols["state"])
        if self.has_actions and cols and not set(STEP_FIELDS) <= set(cols):
            # rows without a step (live-cache rows): NaN action, no episode end
            n = len(np.asarray(next(iter(cols.values()))))
            for name, tail in shapes.items():
                if name in STEP_FIELDS and name not in cols:
                    cols[name] = np.full((n, *tail), STEP_DEFAULTS[name], dtype=STEP_FIELDS[name])
        missing = set(shapes) - set(cols)
        if missing:
            raise StoreError(f"append is missing fields {sorted(missing)}; every row needs {sorted(shapes)}")
        out: dict[str, np.ndarray] = {}
        sizes = set()
        for name, tail in shapes.items():
            dtype = np.dtype(FRAMES_DTYPE if name == FRAMES else {**ROW_FIELDS, **STEP_FIELDS}[name])
            a = np.asarray(cols[name])
            if not np.can_cast(a.dtype, dtype, casting="same_kind"):
                raise StoreError(f"field '{name}' has dtype {a.dtype}, which does not convert safely to {dtype}")
            if a.ndim != 1 + len(tail) or a.shape[1:] != tail:
                raise StoreError(f"field '{name}' has shape {a.shape}, expected (rows, {', '.join(map(str, tail))})".replace(", )", ")"))
            out[name] = a.astype(dtype, copy=False)
            sizes.add(a.shape[0])
        if len(sizes) != 1:
            raise StoreError(f"append fields have different row counts {sorted(sizes)}")
        return out, sizes.pop()

    def _write_rows(self, node: str, start: int, data: np.ndarray) -> None:
        a = self._arrays[node]
        # Resize from the committed count, not the array's length: this drops (or overwrites)
        # whatever a killed writer left past the commit, so a resume never duplicates rows.
        a.resize((start + len(data), *a.shape[1:]))
        a[start:start + len(data)] = data

    def append(self, batch: Mapping[str, Any], embeddings: Mapping[str, Any] | None = None) -> range:
        """Append rows (all fields of `_shapes`, `key` computed from `state` if absent), then commit.

        embeddings: optional {model_id: [rows, V, D]} for models already in the store whose
        embeddings are complete up to now; written in the same commit (the live cache path).
        Returns the committed row range.
        """
        lock = self._require_writer()
        cols, b = self._check_batch(batch)
        n = self._rows
        embs = {m: self._check_embeddings(m, n, e) for m, e in (embeddings or {}).items()}
        for m, e in embs.items():
            if len(e) != b:
                raise StoreError(f"embeddings of '{m}' have {len(e)} rows but the batch has {b}")
        if b == 0:
            return range(n, n)
        lock.heartbeat()
        for name, data in cols.items():
            self._write_rows(name, n, data)
        emb_rows = dict(self._emb_rows)
        for m, e in embs.items():
            self._write_rows(self._emb_node(m), n, e)
            emb_rows[m] = n + b
        self._commit(n + b, emb_rows)
        return range(n, n + b)

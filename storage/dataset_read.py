"""Reading committed rows of a dataset store: row and view selection, the chunk-existence
check before a read (a missing chunk would read as fill values) and ``read`` / ``episodes``."""

from __future__ import annotations

from itertools import product
from typing import Any
from collections.abc import Sequence

import numpy as np

from storage.dataset_verify import VERIFY_HINT, Damage
from storage.errors import StoreError
from storage.schema import FRAMES

Rows = int | slice | Sequence[int] | np.ndarray | None

_EXISTS_MAX = 16
"""Up to this many chunk files a read of a remote store checks one by one; more: one listing of the
array (a local store always checks them one by one)."""
_STAT_LOCAL = True
"""Local stores check chunk files one by one; False lists the array as for object storage
(bench/chunk_check.py times both)."""


def _blosc_trailer(a: Any) -> int | None:
    """Bytes after the blosc frame in a chunk file of array ``a`` (4: a CRC32C; 0: none), or None
    when its last compression step is neither blosc nor blosc then CRC32C."""
    from zarr.codecs import BloscCodec, Crc32cCodec

    comp = list(a.compressors or ())
    if comp and isinstance(comp[-1], Crc32cCodec):
        return 4 if len(comp) >= 2 and isinstance(comp[-2], BloscCodec) else None
    return 0 if comp and isinstance(comp[-1], BloscCodec) else None


def _size_problem(path: str, trailer: int) -> str | None:
    """A truncated or overwritten local chunk file: its size against the compressed size in its
    blosc header (bytes 12-15) plus ``trailer``; None if they agree."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            size = f.seek(0, 2)
    except OSError as e:
        return f"chunk file cannot be read ({type(e).__name__})"
    if len(head) < 16:
        return f"chunk file is truncated ({size} bytes, shorter than a blosc header)"
    want = int.from_bytes(head[12:16], "little") + trailer
    if want != size:
        return f"chunk file has {size} bytes but its header says {want} (truncated or overwritten)"
    return None


def _take(arr: Any, idx: slice | np.ndarray, view_idx: np.ndarray | None = None) -> np.ndarray:
    """Rows `idx` (slice or int array, any order, repeats allowed) and optionally some views of axis 1."""
    views = () if view_idx is None else (view_idx,)
    tail = (slice(None),) * (arr.ndim - 1 - len(views))
    if isinstance(idx, slice):
        sel = (idx, *views, *tail)
        return arr.oindex[sel] if views else arr[sel]
    if idx.size == 0:
        shape = list(arr.shape)
        shape[0] = 0
        if views:
            shape[1] = len(view_idx)
        return np.empty(shape, dtype=arr.dtype)
    # zarr reads each chunk once for sorted unique rows; map back to the caller's order.
    uniq, inv = np.unique(idx, return_inverse=True)
    return arr.oindex[(uniq, *views, *tail)][inv]


class StoreRead:
    """The reading part of :class:`storage.dataset.DatasetStore` (a mixin over its state:
    location, arrays, commit counts, views, the chunks already checked)."""

    def _take(self, node: str, idx: slice | np.ndarray, view_idx: np.ndarray | None = None) -> np.ndarray:
        """`_take` on array `node`; a read that fails names the store, array and rows."""
        a = self._arrays[node]
        self._require_chunks(node, a, idx)
        try:
            return _take(a, idx, view_idx)
        except Exception as e:
            if isinstance(idx, slice):
                span = (idx.start or 0, idx.stop)
            else:
                span = (int(idx.min()), int(idx.max()) + 1)
            raise self._damaged(node, a, span, e) from None

    def _require_chunks(self, node: str, a: Any, idx: slice | np.ndarray) -> None:
        """In a store that writes every chunk (`INTEGRITY`), check that the chunk files holding
        rows `idx` of `node` exist: Zarr reads a missing chunk as fill values (zeros), which no
        reader could tell from data. A listing, not a read; each chunk row is checked once per
        open store."""
        if not (self._info.get("integrity") or {}).get("all_chunks_written"):
            return
        c0 = int(a.chunks[0])
        if isinstance(idx, slice):
            start, stop = idx.start or 0, idx.stop
            need: Sequence[int] = range(start // c0, -(-stop // c0)) if stop > start else ()
        else:
            need = np.unique(idx // c0).tolist() if idx.size else ()
        seen = self._chunks_seen.setdefault(node, set())
        todo = [int(i) for i in need if i not in seen]
        if not todo:
            return
        rest = [range(-(-int(n) // int(c))) for n, c in zip(a.shape[1:], a.chunks[1:])]
        keys = [((i, *t), f"{self._loc.path}/{node}/{a.metadata.encode_chunk_key((i, *t))}")
                for i in todo for t in product(*rest)]
        fs = self._loc.fs
        # On a local disk a stat per chunk file (~2 us) beats walking the array's nested chunk
        # directories (bench/chunk_check.py); on object storage each look-up is a request, so
        # more than a few become one listing of the array.
        if (self._loc.is_local and _STAT_LOCAL) or len(keys) <= _EXISTS_MAX:
            present = fs.exists
        else:
            present = set(fs.find(f"{self._loc.path}/{node}")).__contains__
        trailer = _blosc_trailer(a) if self._loc.is_local else None
        for coords, key in keys:
            problem = None
            if not present(key):
                problem = "chunk file is missing (it would read as fill values)"
            elif trailer is not None:
                # A missing and a truncated chunk are refused alike before any read: the file's size
                # against its blosc header (16 bytes read, no decode; flipped bytes: at read or verify).
                problem = _size_problem(key, trailer)
            if problem:
                limit = self._row_limit(node, 0)
                view = self.views[coords[1]] if node == FRAMES and coords[1] < len(self.views) else None
                bad = Damage(node, problem, coords, (coords[0] * c0, min((coords[0] + 1) * c0, limit)), view)
                raise StoreError(f"store {self._loc} is damaged: cannot read {bad.describe()}; "
                                 f"{VERIFY_HINT.format(store=self._loc)}, then restore the store from a copy "
                                 f"or re-create it")
        seen.update(todo)

    def _index(self, rows: Rows, n: int, what: str = "committed rows") -> tuple[slice | np.ndarray, bool]:
        if rows is None:
            return slice(0, n), False
        if isinstance(rows, slice):
            start, stop, step = rows.indices(n)
            return (slice(start, stop) if step == 1 else np.arange(start, stop, step)), False
        squeeze = np.ndim(rows) == 0
        idx = np.atleast_1d(np.asarray(rows))
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"rows must be integers or a slice, got dtype {idx.dtype}")
        idx = idx.astype(np.int64)
        idx = np.where(idx < 0, idx + n, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"rows out of range: {what} are 0..{n - 1}")
        return idx, squeeze

    def _view_index(self, views: Sequence[str] | None) -> np.ndarray | None:
        if views is None:
            return None
        unknown = [v for v in views if v not in self.views]
        if unknown:
            raise StoreError(f"unknown views {unknown}; this store has {self.views}")
        return np.array([self.views.index(v) for v in views], dtype=np.int64)

    def read(self, rows: Rows = None, fields: Sequence[str] | None = None, views: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Committed rows of the requested fields as {field: array}.

        rows: None (all), a slice, an int, or integer indices in any order. fields: default
        all per-row fields except `frames` (ask for it explicitly). views selects axis 1 of
        `frames`.
        """
        fields = [f for f in self._shapes() if f != FRAMES] if fields is None else list(fields)
        unknown = [f for f in fields if f not in self._shapes()]
        if unknown:
            raise StoreError(f"unknown fields {unknown}; this store has {sorted(self._shapes())}")
        idx, squeeze = self._index(rows, self._rows)
        vidx = self._view_index(views)
        out = {f: self._take(f, idx, vidx if f == FRAMES else None) for f in fields}
        return {f: v[0] for f, v in out.items()} if squeeze else out

    def require_chunks(self, fields: Sequence[str] | None = None) -> None:
        """Check, without reading them, that the chunk files of every committed row of ``fields``
        (default: every per-row field, ``frames`` included) exist: a command that imports torch
        or open_clip before its first read fails at once on a damaged store, with the same
        one-line StoreError a read would raise."""
        if not self._rows:  # an empty store has no chunk to miss
            return
        for f in (list(self._shapes()) if fields is None else fields):
            self._require_chunks(f, self._arrays[f], slice(0, self._rows))

    def episodes(self) -> dict[int, np.ndarray]:
        """{episode id: its committed row indices in step order}."""
        cols = self.read(fields=["episode", "step"])
        ep, st = cols["episode"], cols["step"]
        order = np.lexsort((st, ep))
        ids, starts = np.unique(ep[order], return_index=True)
        return {int(i): rows for i, rows in zip(ids, np.split(order, starts[1:]))} if len(ep) else {}

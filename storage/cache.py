"""FAISS state cache: render-relevant key vectors -> rows of a dataset store.

A hit returns the stored per-view embeddings of the nearest stored state within a radius
(in the units of the task's key spec, storage.key_spec), so live training skips rendering and embedding
near-duplicate states. The index covers rows [0, n) of the store, where n is the number
of rows with committed embeddings of the cache's model (all committed rows when the cache
has no model). Committed rows never change (storage.dataset_append), so an index saved at n rows
stays valid for those rows and is extended when the store grows; anything else that does
not match (store identity, model, index kind, key layout, checksum) makes it rebuilt.

Files, next to the store: `<store>.cache/<name>.faiss` (faiss.serialize_index bytes) and
`<store>.cache/<name>.json` (sidecar, written after the index; see docs/storage.md).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Literal, NamedTuple
from collections.abc import Sequence

import faiss
import numpy as np

from storage.errors import StoreError
from storage.key_spec import KeySpec
from storage.dataset import DatasetStore
from storage.location import Location
from storage.schema import model_node_name

CACHE_FORMAT = "rmtl.state_cache"
CACHE_VERSION = 1
IndexKind = Literal["flat", "hnsw"]
_BUILD_BLOCK = 65536


def set_faiss_threads(n: int = 1) -> None:
    """Limit FAISS's OpenMP threads (call once in RL worker processes: 16 envs x all cores
    of OMP threads oversubscribe the machine for searches that take microseconds)."""
    faiss.omp_set_num_threads(int(n))


class HitRate:
    """``hit_rate`` of a lookup result with a boolean ``hit`` array."""

    hit: np.ndarray

    @property
    def hit_rate(self) -> float:
        return float(self.hit.mean()) if len(self.hit) else 0.0


class CacheLookup(NamedTuple):
    """Result of a batch lookup: hit [B] bool, rows [B] int64 (-1 on miss), distances [B]
    float32 (key-space L2 distance to the nearest stored key, inf when the index is empty)."""

    hit: np.ndarray
    rows: np.ndarray
    distances: np.ndarray

    @property
    def hit_rate(self) -> float:
        return float(self.hit.mean()) if len(self.hit) else 0.0


def _extend(buf: np.ndarray | None, new: np.ndarray, start: int) -> np.ndarray:
    """A buffer holding ``buf[:start]`` then ``new``, grown by doubling, so a cache extended a
    few rows at a time (the live overlay) copies O(n) in total rather than O(n^2)."""
    stop = start + len(new)
    if buf is None or len(buf) < stop or buf.shape[1:] != new.shape[1:]:
        grown = np.empty((max(stop, 2 * (len(buf) if buf is not None else 0)), *new.shape[1:]), new.dtype)
        if buf is not None and start:
            grown[:start] = buf[:start]
        buf = grown
    buf[start:stop] = new
    return buf


class StateCache:
    """The state cache of one store (and optionally one model); use `StateCache.open`."""

    def __init__(
        self,
        store: DatasetStore,
        model_id: str | None = None,
        kind: IndexKind = "flat",
        name: str | None = None,
        hnsw_m: int = 32,
        hnsw_ef_search: int = 64,
        preload: bool = False,
    ):
        if kind not in ("flat", "hnsw"):
            raise StoreError(f"cache kind must be 'flat' or 'hnsw', got {kind!r}")
        if model_id is not None and model_id not in store.model_ids():
            raise StoreError(f"{store.path} has no embeddings of model '{model_id}' to cache "
                             f"(it has {store.model_ids() or 'none'}); embed the store first")
        self.store = store
        self.model_id = model_id
        self.kind: IndexKind = kind
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_search = int(hnsw_ef_search)
        self.preload = preload
        self.name = name or f"{model_node_name(model_id) if model_id else 'keys'}-{kind}"
        folder = store.location.sibling(".cache")
        self.index_location: Location = folder.child(f"{self.name}.faiss")
        self.sidecar_location: Location = folder.child(f"{self.name}.json")
        self.status = "new"
        """How the index got here: 'loaded', 'extended', 'built' or 'rebuilt: <reason>'."""
        self._index = self._new_index()
        self._n = 0
        self._emb: np.ndarray | None = None
        self._emb_buf: np.ndarray | None = None

    # -- opening -------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        store: DatasetStore,
        model_id: str | None = None,
        kind: IndexKind = "flat",
        *,
        name: str | None = None,
        hnsw_m: int = 32,
        hnsw_ef_search: int = 64,
        preload: bool = False,
        persist: bool = True,
    ) -> StateCache:
        """Load the persisted index if it matches the store, extend it to the store's
        current rows, or rebuild it from the store's keys; save it again if it changed
        and persist is True. preload keeps the model's embeddings in memory (fast hits)."""
        cache = cls(store, model_id, kind, name, hnsw_m, hnsw_ef_search, preload)
        reason = cache._load()
        if reason is None:
            cache.status = "loaded"
        elif reason == "missing":
            cache.status = "built"
        else:
            cache.status = f"rebuilt: {reason}"
        added = cache.sync()
        if reason is None and added:
            cache.status = "extended"
        if persist and (reason is not None or added):
            cache.save()
        return cache

    def _new_index(self) -> Any:
        d = self.store.key_dim
        if self.kind == "flat":
            return faiss.IndexIDMap(faiss.IndexFlatL2(d))
        inner = faiss.IndexHNSWFlat(d, self.hnsw_m)
        inner.hnsw.efSearch = self.hnsw_ef_search
        # IndexIDMap maps HNSW's internal ids to store rows (HNSW itself has no add_with_ids).
        return faiss.IndexIDMap(inner)

    def _identity(self) -> dict[str, Any]:
        """What a persisted index must match to be reused."""
        return {
            "format": CACHE_FORMAT,
            "version": CACHE_VERSION,
            "store_uuid": self.store.uuid,
            "model_id": self.model_id,
            "kind": self.kind,
            "hnsw_m": self.hnsw_m if self.kind == "hnsw" else None,
            "key_dim": self.store.key_dim,
            "key_spec": self.store.info.get("key_spec"),
        }

    def _load(self) -> str | None:
        """Read the persisted index; returns None if usable, else why it is not."""
        try:
            side = self.sidecar_location.read_json()
            blob = self.index_location.read_bytes()
        except FileNotFoundError:
            return "missing"
        except ValueError:
            return "unreadable sidecar"
        if not isinstance(side, dict):
            return "unreadable sidecar"
        for k, v in self._identity().items():
            if side.get(k) != v:
                return f"{k} changed ({side.get(k)!r} -> {v!r})"
        if hashlib.sha256(blob).hexdigest() != side.get("index_sha256"):
            return "index file does not match its sidecar"
        rows = side.get("rows_indexed")
        if not isinstance(rows, int) or rows > self.coverage():
            return f"index covers {rows} rows but the store has {self.coverage()}"
        index = faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))
        if index.ntotal != rows:
            return "index size does not match its sidecar"
        if self.kind == "hnsw":
            faiss.downcast_index(index.index).hnsw.efSearch = self.hnsw_ef_search
        self._index, self._n = index, rows
        if self.preload:
            self._emb_buf = self.store.embeddings(self.model_id, slice(0, rows)) if self.model_id else None
            self._emb = self._emb_buf
        return None

    # -- building ------------------------------------------------------------------------
    @property
    def num_indexed(self) -> int:
        """Rows [0, n) of the store that are in the index."""
        return self._n

    def coverage(self) -> int:
        """Rows the index should cover: rows with embeddings of the model (or all rows)."""
        return self.store.embedded_rows(self.model_id) if self.model_id else self.store.num_rows

    def _insert(self, keys: np.ndarray, start: int) -> None:
        self._index.add_with_ids(np.ascontiguousarray(keys, dtype=np.float32), np.arange(start, start + len(keys), dtype=np.int64))
        if self.preload and self.model_id:
            new = self.store.embeddings(self.model_id, slice(start, start + len(keys)))
            self._emb_buf = _extend(self._emb_buf, new, start)
            self._emb = self._emb_buf[:start + len(keys)]
        self._n = start + len(keys)

    def sync(self) -> int:
        """Index store rows added since the index was built (call `store.refresh()` first in
        a reader process); returns how many rows were added."""
        stop = self.coverage()
        start = self._n
        for a in range(start, stop, _BUILD_BLOCK):
            b = min(stop, a + _BUILD_BLOCK)
            self._insert(self.store.read(slice(a, b), ["key"])["key"], a)
        return stop - start

    def rebuild(self) -> None:
        """Drop the index and build it from the store's keys."""
        self._index, self._n, self._emb, self._emb_buf = self._new_index(), 0, None, None
        self.sync()
        self.status = "rebuilt: on request"

    def add(self, keys: Any, rows: Sequence[int] | np.ndarray) -> None:
        """Index new store rows (the live path: rows just appended with their embeddings).

        rows must continue the index (num_indexed, num_indexed+1, ...) and be committed in
        the store with embeddings; keys must be the keys stored for those rows.
        """
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        keys = np.asarray(keys, dtype=np.float32).reshape(len(rows), -1) if len(rows) else np.zeros((0, self.store.key_dim), np.float32)
        if len(rows) == 0:
            return
        if not np.array_equal(rows, np.arange(self._n, self._n + len(rows))):
            raise StoreError(f"cache rows must continue the index: expected rows from {self._n}, got {rows[:3].tolist()}...")
        if rows[-1] >= self.coverage():
            raise StoreError(f"row {rows[-1]} is not committed{' with embeddings of ' + self.model_id if self.model_id else ''} "
                             f"in {self.store.path}; append it to the store before adding it to the cache")
        stored = self.store.read(slice(int(rows[0]), int(rows[-1]) + 1), ["key"])["key"]
        if keys.shape != stored.shape or not np.array_equal(keys, stored):
            raise StoreError("keys given to cache.add differ from the keys stored for those rows; pass the store's keys")
        self._insert(keys, int(rows[0]))

    def save(self) -> None:
        """Persist the index, then its sidecar (a reader trusts the pair only if the sidecar's
        checksum matches the index file)."""
        blob = faiss.serialize_index(self._index).tobytes()
        self.index_location.write_bytes(blob)
        self.sidecar_location.write_json({
            **self._identity(),
            "rows_indexed": self._n,
            "index_sha256": hashlib.sha256(blob).hexdigest(),
            "store_path": self.store.path,
            "saved": time.time(),
        })

    # -- querying ------------------------------------------------------------------------
    def lookup(self, keys: Any, radius: float) -> CacheLookup:
        """Nearest stored key for each query key [B, key_dim]; a hit when within `radius`
        (L2 in key units, metres). FAISS returns squared L2, compared with radius**2."""
        if radius < 0:
            raise StoreError(f"cache radius must be >= 0, got {radius}")
        q = np.ascontiguousarray(np.asarray(keys, dtype=np.float32).reshape(-1, self.store.key_dim))
        if self._n == 0 or len(q) == 0:
            return CacheLookup(np.zeros(len(q), bool), np.full(len(q), -1, np.int64), np.full(len(q), np.inf, np.float32))
        d2, ids = self._index.search(q, 1)
        d2, ids = d2[:, 0], ids[:, 0]
        found = ids >= 0
        hit = found & (d2 <= np.float32(radius) ** 2)
        dist = np.where(found, np.sqrt(np.maximum(d2, 0)), np.inf).astype(np.float32)
        return CacheLookup(hit, np.where(hit, ids, -1).astype(np.int64), dist)

    def fetch(self, keys: Any, radius: float, views: Sequence[str] | None = None) -> tuple[CacheLookup, np.ndarray]:
        """`lookup` plus the stored embeddings: float16 [B, V, D], NaN rows on misses (so a
        miss used by mistake poisons the reward instead of looking like a real score)."""
        if self.model_id is None:
            raise StoreError("this cache has no model; open it with StateCache.open(store, model_id=...) to fetch embeddings")
        res = self.lookup(keys, radius)
        nv = len(views) if views is not None else len(self.store.views)
        d = int(self.store.embedding_info(self.model_id)["embed_dim"]) if self._emb is None else self._emb.shape[2]
        out = np.full((len(res.rows), nv, d), np.nan, dtype=np.float16)
        if res.hit.any():
            rows = res.rows[res.hit]
            if self._emb is not None:
                emb = self._emb[rows]
                if views is not None:
                    emb = emb[:, [self.store.views.index(v) for v in views]]
            else:
                emb = self.store.embeddings(self.model_id, rows, views)
            out[res.hit] = emb
        return res, out

    def state_keys(self, states: Any, key_spec: KeySpec) -> np.ndarray:
        """Keys of states by the task's ``key_spec``, after checking the store's keys were made
        with the same spec (else hits would be neighbours in another key space)."""
        key_spec.check_store(self.store.info.get("key_spec"), str(self.store.path))
        return key_spec.keys(states)

    def __repr__(self) -> str:
        return f"StateCache({self.store.path}, model={self.model_id!r}, kind={self.kind}, rows={self._n}, status={self.status!r})"

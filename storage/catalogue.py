"""A state cache over a catalogue of stores: read-only atlas shards plus one run's overlay.

The atlas is a large render-and-embed dataset that every run and variant opens
read-only (embeddings, not rewards, are cached, so any prompt set, alpha or view subset
reuses it). Each run writes the states it had to render to its own *overlay* store, and
:class:`StoreCatalogue` answers a lookup with the nearest stored key over all of them.

Overlay appends never block a rollout step: :class:`BackgroundAppender` takes batches
on a bounded queue and a writer thread appends them (states, keys, embeddings; one
commit per batch, storage.dataset_append), then extends the overlay's index with the committed
rows only. A kill at any moment leaves a store that opens with whole batches; the next
open of its cache indexes whatever was committed (storage.cache). If the queue is full
the batch is dropped and counted (the states are simply rendered again next time).

Every store must hold embeddings of the catalogue's model and frames of the catalogue's
renderer (``renderer_id``; stores written before renderer ids count as
``unrecorded_renderer_id``): hits from another model or renderer would pay a different reward.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from storage.cache import CacheLookup, HitRate, StateCache
from storage.dataset import ACTION_DIM, DatasetStore
from storage.errors import StoreError
from storage.key_spec import KeySpec


@dataclass(frozen=True)
class CatalogueLookup(HitRate):
    """One batch through the catalogue: hit [B]; source [B] index of the store in
    ``catalogue.stores`` (-1 on a miss); rows [B] row in that store; distances [B]."""

    hit: np.ndarray
    source: np.ndarray
    rows: np.ndarray
    distances: np.ndarray


def check_store_for(store: DatasetStore, model_id: str, renderer_id: str | None, unrecorded_renderer_id: str | None,
                    role: str) -> None:
    """One-line StoreError unless ``store`` holds ``model_id`` embeddings of ``renderer_id`` frames."""
    if model_id not in store.model_ids():
        raise StoreError(f"{role} {store.path} has no embeddings of '{model_id}' (it has {store.model_ids() or 'none'}); "
                         f"embed it with that model or train with the model it was embedded with")
    if renderer_id is not None:
        have = store.renderer_id or unrecorded_renderer_id
        if have != renderer_id:
            raise StoreError(f"{role} {store.path} was rendered by renderer {have} but this run renders with {renderer_id}; "
                             "build the atlas with the run's render settings (env.render) or train with the atlas's")


class StoreCatalogue:
    """Nearest-key lookups over several stores' state caches (see module docstring)."""

    def __init__(self, caches: Sequence[StateCache], overlay: StateCache | None = None):
        self.caches: list[StateCache] = list(caches) + ([overlay] if overlay is not None else [])
        if not self.caches:
            raise StoreError("a cache catalogue needs at least one store")
        self.overlay = overlay
        self.model_id = self.caches[0].model_id
        views = [tuple(c.store.views) for c in self.caches]
        if len(set(views)) != 1 or len({c.store.key_dim for c in self.caches}) != 1:
            raise StoreError(f"catalogue stores differ in views or key layout: {sorted(set(views))}")
        self.lock = threading.Lock()
        """Held while the overlay's index is searched or extended."""

    @property
    def stores(self) -> list[DatasetStore]:
        return [c.store for c in self.caches]

    @property
    def views(self) -> tuple[str, ...]:
        return tuple(self.caches[0].store.views)

    @classmethod
    def open(cls, atlas: Sequence[str | os.PathLike[str]], model_id: str, *, overlay: str | os.PathLike[str] | None = None,
             renderer_id: str | None = None, unrecorded_renderer_id: str | None = None,
             kind: str = "flat", key_spec: KeySpec | None = None,
             code: Mapping[str, Any] | None = None) -> StoreCatalogue:
        """Open atlas stores read-only and the overlay for append (created, frames-less, when
        missing, with ``key_spec``'s keys), with their caches for ``model_id`` (embeddings preloaded)."""
        opened: list[DatasetStore] = []
        try:
            caches = []
            for path in atlas:
                store = DatasetStore.open(path, "r")
                opened.append(store)
                check_store_for(store, model_id, renderer_id, unrecorded_renderer_id, "atlas")
                caches.append(StateCache.open(store, model_id, kind=kind, preload=True, persist=False))
            over = None
            if overlay is not None:
                if key_spec is None:
                    raise StoreError("an overlay store needs the task's key_spec (its rows are keyed with it)")
                store = open_overlay(overlay, model_id, opened[0] if opened else None, renderer_id, key_spec, code)
                opened.append(store)
                check_store_for(store, model_id, renderer_id, unrecorded_renderer_id, "overlay")
                over = StateCache.open(store, model_id, kind="flat", preload=True)
            return cls(caches, over)
        except BaseException:
            for s in opened:
                s.close()
            raise

    # ------------------------------------------------------------------ queries
    def state_keys(self, states: Any, key_spec: KeySpec) -> np.ndarray:
        """Keys of states by the task's ``key_spec``, checked against every store's recorded spec."""
        for cache in self.caches[1:]:
            key_spec.check_store(cache.store.info.get("key_spec"), str(cache.store.path))
        return self.caches[0].state_keys(states, key_spec)

    def lookup(self, keys: Any, radius: float) -> CatalogueLookup:
        """The nearest stored key over every store; a hit when within ``radius``."""
        q = np.asarray(keys, dtype=np.float32)
        best = np.full(len(q), np.inf, np.float32)
        source = np.full(len(q), -1, np.int64)
        rows = np.full(len(q), -1, np.int64)
        for i, cache in enumerate(self.caches):
            with self._guard(cache):
                res: CacheLookup = cache.lookup(q, np.inf)
            closer = res.distances < best
            best[closer], source[closer] = res.distances[closer], i
            rows[closer] = res.rows[closer]
        hit = best <= np.float32(radius)
        return CatalogueLookup(hit, np.where(hit, source, -1), np.where(hit, rows, -1), best)

    def fetch(self, keys: Any, radius: float, views: Sequence[str] | None = None) -> tuple[CatalogueLookup, np.ndarray]:
        """``lookup`` plus the stored float16 embeddings [B, V, D] (NaN rows on misses)."""
        res = self.lookup(keys, radius)
        view_idx = [self.views.index(v) for v in views] if views is not None else list(range(len(self.views)))
        d = self._dim()
        out = np.full((len(res.rows), len(view_idx), d), np.nan, np.float16)
        for i, cache in enumerate(self.caches):
            sel = np.flatnonzero(res.source == i)
            if len(sel):
                with self._guard(cache):
                    emb = cache._emb[res.rows[sel]]
                out[sel] = emb[:, view_idx]
        return res, out

    def _guard(self, cache: StateCache):
        """The lock for the overlay (the writer thread extends it), nothing for read-only stores."""
        return self.lock if cache is self.overlay else contextlib.nullcontext()

    def _dim(self) -> int:
        for c in self.caches:
            if c._emb is not None and c._emb.ndim == 3:
                return int(c._emb.shape[2])
        return int(self.caches[0].store.embedding_info(self.model_id)["embed_dim"])

    @property
    def num_indexed(self) -> int:
        return sum(c.num_indexed for c in self.caches)

    def close(self) -> None:
        for c in self.caches:
            c.store.close()


def open_overlay(path: str | os.PathLike[str], model_id: str, like: DatasetStore | None,
                 renderer_id: str | None, key_spec: KeySpec, code: Mapping[str, Any] | None = None) -> DatasetStore:
    """Open a run's overlay store for append; create it (no frames, the views, layout and
    action width of ``like``, keys of ``key_spec``) if missing. code: as DatasetStore.create's."""
    from pathlib import Path

    p = Path(path)
    if p.exists() and any(p.iterdir()):
        return DatasetStore.open(p, "a")
    if like is None:
        raise StoreError(f"overlay {p} does not exist and there is no atlas to take its views from; name an atlas store")
    key_spec.check_store(like.info.get("key_spec"), str(like.path))
    store = DatasetStore.create(p, views=like.views, resolution=like.resolution, frames=False, key_spec=key_spec,
                                layout=like.info.get("layout"), action_dim=int(like.info.get("action_dim") or ACTION_DIM),
                                code=code, visual_domain=like.info.get("visual_domain"),
                                renderer={"renderer_id": renderer_id} if renderer_id else like.info.get("renderer"),
                                provenance={"kind": "overlay", "atlas": like.path})
    d = int(like.embedding_info(model_id)["embed_dim"])
    store.add_embeddings(model_id, 0, np.zeros((0, len(like.views), d), np.float32),
                         meta={**like.embedding_info(model_id)["meta"], "overlay": True})
    return store


class BackgroundAppender:
    """Appends rendered misses to the overlay store and index on a writer thread.

    ``submit`` never blocks: a full queue drops the batch (counted in ``dropped``).
    ``close`` drains the queue, persists the index and reports errors from the thread.
    """

    def __init__(self, catalogue: StoreCatalogue, max_pending: int = 64):
        if catalogue.overlay is None:
            raise StoreError("background appends need an overlay store in the catalogue")
        self.catalogue = catalogue
        self.cache = catalogue.overlay
        self.store = catalogue.overlay.store
        self._queue: queue.Queue = queue.Queue(maxsize=int(max_pending))
        self.appended = self.dropped = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="overlay-writer", daemon=True)
        self._thread.start()

    def submit(self, batch: dict[str, np.ndarray], embeddings: np.ndarray) -> bool:
        """Queue rows (``state``, ``key``, labels) and their embeddings [B, V, D]; False if dropped."""
        if self.error is not None:
            raise StoreError(f"the overlay writer of {self.store.path} stopped: {self.error}")
        try:
            self._queue.put_nowait((batch, embeddings))
        except queue.Full:
            self.dropped += len(embeddings)
            return False
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                batch, emb = item
                added = self.store.append(batch, embeddings={self.cache.model_id: emb})
                rows = np.arange(added.start, added.stop, dtype=np.int64)
                with self.catalogue.lock:
                    self.cache.add(batch["key"], rows)
                self.appended += len(rows)
            except BaseException as err:  # surfaced by the next submit / close
                self.error = err
                return
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Wait until every queued batch is committed and indexed."""
        if self._thread.is_alive():
            self._queue.join()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self.appended:
            with self.catalogue.lock:
                self.cache.save()
        if self.error is not None:
            raise StoreError(f"the overlay writer of {self.store.path} failed: {self.error}")

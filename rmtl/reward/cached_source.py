"""The cached reward path for training: an :class:`~rmtl.reward.source.EmbeddingSource`
backed by the FAISS state cache (storage.cache).

Per step, for the states of the B sub-envs: look their keys up in the cache; a hit
returns the stored per-view embeddings of the nearest stored state within ``radius``
(in the units of the task's key spec); the misses alone are rendered (through the
``render`` callable the reward wrapper passes, or :func:`env_renderer`) and embedded in
one VLM call. With ``append=True`` the misses are appended to the store (frames if the
store keeps them, state, key, labels, and their embeddings in the same commit) and then
added to the index, so the next visit of such a state is a hit.

Committed-rows semantics (storage.dataset_append): rows and their embeddings become visible in
one commit; the index is extended only with committed rows (``StateCache.add`` checks
it), so a crash between the two leaves rows that the next ``StateCache.open`` indexes.
The store must be opened for append (one writer per store: give each training process
its own store, or append from one process only). Rows written here have no trajectory:
``episode = LIVE_EPISODE`` (-1), ``step`` a running counter, ``success`` False and
``difficulty`` NaN; the analysis steps (pipeline.stores.store_rows) and pipeline.analyses.query leave them out.
The task decides the key (``key_spec``) and the appended rows' phase label (``phase_labels``).

Hits return the stored float16 embeddings as float32. With ``quantize=True`` (default)
misses are rounded through float16 too, so a state gets the same reward whether it was
served fresh or, later, from the cache.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from rmtl.errors import ConfigError, StoreError
from rmtl.reward.source import FrameRenderer, VLMEmbeddingSource
from storage.cache import HitRate
from storage.key_spec import KeySpec

PhaseLabels = Callable[[np.ndarray], np.ndarray]
"""states [B, state_dim] -> phase ids [B]: the ``phase_rule`` label of appended rows."""

DEFAULT_RADIUS = 0.01
"""Default cache radius (m in key space), chosen from bench/cache_accuracy.py: with a 61.5k-state
atlas, held-out noisy-expert states hit 32% of the time with a shaped-reward error of 0.010
averaged over all steps (0.028 on hits); 0.02 hits 79% but errs 0.025 over all steps, a
fifth of the shaped reward's mean step change (0.11). results/bench/cache_accuracy.json."""

LIVE_EPISODE = -1
"""Episode id of rows appended by the live path (they belong to no recorded episode)."""


@dataclass(frozen=True)
class LiveLookup(HitRate):
    """One batch through the cache: embeddings float32 [B, V, D]; hit [B]; rows [B] the
    store row whose embeddings were returned (the appended row for an appended miss, -1 for
    a miss not appended); distances [B] key-space distance to the nearest stored key."""

    embeddings: np.ndarray
    hit: np.ndarray
    rows: np.ndarray
    distances: np.ndarray


@dataclass
class LiveStats:
    batches: int = 0
    states: int = 0
    hits: int = 0
    rendered: int = 0
    appended: int = 0
    dropped: int = 0
    hit_distance_sum: float = 0.0
    hits_by_source: dict[int, int] = field(default_factory=dict)
    per_batch_hit_rate: list[float] = field(default_factory=list)
    audited: int = 0
    audit_abs_error_sum: float = 0.0
    """Sum over audited hits of the mean |cached - fresh| score over prompts (multi-view mean)."""

    @property
    def hit_rate(self) -> float:
        return self.hits / self.states if self.states else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "states": self.states, "hits": self.hits, "rendered": self.rendered,
                "appended": self.appended, "dropped": self.dropped, "hit_rate": self.hit_rate,
                "mean_hit_distance": self.hit_distance_sum / self.hits if self.hits else float("nan"),
                "hits_by_source": {str(k): v for k, v in sorted(self.hits_by_source.items())},
                "audited_hits": self.audited,
                "audit_score_mae_on_hits": self.audit_abs_error_sum / self.audited if self.audited else float("nan")}


def env_renderer(envs: Sequence[Any], views: Sequence[str], resolution: int) -> FrameRenderer:
    """A FrameRenderer over a list of envs with ``render_views`` (env i renders its current state)."""
    names = tuple(views)  # the env checks them against its camera bank

    def render(indices: np.ndarray) -> np.ndarray:
        idx = [int(i) for i in np.asarray(indices).reshape(-1)]
        if not idx:
            return np.zeros((0, len(names), resolution, resolution, 3), np.uint8)
        return np.stack([envs[i].render_views(names, resolution) for i in idx])

    return render


class CachedEmbeddingSource:
    """EmbeddingSource: cache lookup, render + embed only the misses, optionally append them.

    cache: a StateCache with a model (``StateCache.open(store, model_id, preload=True)``
    keeps the embeddings in memory, the fast choice for training); vlm: the model whose
    embeddings the cache holds (misses are embedded with it); views: the caller's view
    axis (default the store's views; with append it must be exactly the store's views).
    """

    def __init__(
        self,
        cache: Any,
        vlm: Any,
        radius: float = DEFAULT_RADIUS,
        views: Sequence[str] | None = None,
        append: bool = False,
        batch_size: int | None = None,
        quantize: bool = True,
        save_every: int = 0,
        appender: Any = None,
        audit_every: int = 0,
        audit_scorer: Any = None,
        *,
        key_spec: KeySpec,
        phase_labels: PhaseLabels,
    ):
        if cache.model_id is None:
            raise ConfigError("the state cache has no model; open it with StateCache.open(store, model_id=...)")
        if vlm.model_id != cache.model_id:
            raise ConfigError(f"the cache holds embeddings of '{cache.model_id}' but the VLM is '{vlm.model_id}'; "
                              "misses must be embedded with the same model")
        if radius < 0:
            raise ConfigError(f"cache radius must be >= 0, got {radius}")
        catalogue = hasattr(cache, "caches")
        store = (cache.overlay.store if cache.overlay is not None else cache.stores[0]) if catalogue else cache.store
        stored_views = tuple(cache.views) if catalogue else tuple(store.views)
        self.cache = cache
        self.store = store
        self.vlm = vlm
        self.radius = float(radius)
        self.views = tuple(views) if views is not None else stored_views
        unknown = [v for v in self.views if v not in stored_views]
        if unknown:
            raise ConfigError(f"views {unknown} are not in the store's views {list(stored_views)}")
        self.appender = appender
        self.append = bool(append) or appender is not None
        if self.append:
            if list(self.views) != list(stored_views):
                raise ConfigError(f"appending misses needs every store view in store order {list(stored_views)}, "
                                  f"but the source renders {list(self.views)}")
        if self.append and appender is None:
            if catalogue:
                raise ConfigError("a catalogue appends through its BackgroundAppender; pass appender=")
            if store.mode != "a":
                raise StoreError(f"{store.path} is open read-only; open it with DatasetStore.open(path, 'a') to append misses")
            if store.embedded_rows(cache.model_id) != store.num_rows:
                raise StoreError(f"{store.path} has {store.num_rows} rows but only {store.embedded_rows(cache.model_id)} "
                                 f"embedded with '{cache.model_id}'; embed the store fully before appending live rows")
        self.key_spec = key_spec
        self.phase_labels = phase_labels
        self.quantize = bool(quantize)
        self.save_every = int(save_every)
        self.audit_every = int(audit_every)
        self.audit_scorer = audit_scorer
        """embeddings [n, V, D] -> multi-view scores [n, K]; audits compare cached and fresh scores."""
        self._embedder = VLMEmbeddingSource(vlm, batch_size or (1 << 30))  # default: one model call per batch
        self._live_step = 0
        self._rng = np.random.default_rng(0)
        self._stats = LiveStats()

    @property
    def stats(self) -> LiveStats:
        """Counters so far (``appended`` / ``dropped``: rows the background writer committed / dropped)."""
        if self.appender is not None:
            self._stats.appended, self._stats.dropped = self.appender.appended, self.appender.dropped
        return self._stats

    @classmethod
    def open_catalogue(
        cls,
        atlas: Sequence[str | os.PathLike[str]],
        model: Any,
        overlay: str | os.PathLike[str] | None = None,
        radius: float = DEFAULT_RADIUS,
        views: Sequence[str] | None = None,
        renderer_id: str | None = None,
        kind: str = "flat",
        max_pending: int = 64,
        *,
        key_spec: KeySpec,
        **kwargs: Any,
    ) -> CachedEmbeddingSource:
        """A source over read-only atlas stores plus the run's ``overlay`` store, whose misses
        a background writer appends (storage.catalogue); ``renderer_id`` must match every store.
        ``key_spec`` (and ``phase_labels`` among ``kwargs``) are the task's."""
        from rmtl.env.render_settings import RENDERER_V1_ID
        from rmtl.vlm import VLM, load_vlm
        from storage.catalogue import BackgroundAppender, StoreCatalogue

        vlm = model if isinstance(model, VLM) else load_vlm(str(model))
        from rmtl.provenance import code_record

        catalogue = StoreCatalogue.open(atlas, vlm.model_id, overlay=overlay, renderer_id=renderer_id,
                                        unrecorded_renderer_id=RENDERER_V1_ID, kind=kind,
                                        key_spec=key_spec, code=code_record())
        with contextlib.ExitStack() as on_error:  # the catalogue stays open only inside a source
            on_error.callback(catalogue.close)
            appender = BackgroundAppender(catalogue, max_pending) if overlay is not None else None
            source = cls(catalogue, vlm, radius, views, appender=appender, key_spec=key_spec, **kwargs)
            on_error.pop_all()
        return source

    @classmethod
    def open(
        cls,
        store_path: str | os.PathLike[str],
        model: Any,
        radius: float = DEFAULT_RADIUS,
        views: Sequence[str] | None = None,
        append: bool = False,
        kind: str = "flat",
        preload: bool = True,
        **kwargs: Any,
    ) -> CachedEmbeddingSource:
        """Open the store (for append when ``append``), its cache for the model (built or
        extended and persisted as needed) and the model (a spec string or a loaded VLM)."""
        from rmtl.vlm import VLM, load_vlm
        from storage.cache import StateCache
        from storage.dataset import DatasetStore

        vlm = model if isinstance(model, VLM) else load_vlm(str(model))
        store = DatasetStore.open(store_path, "a" if append else "r")
        with contextlib.ExitStack() as on_error:  # the store stays open only inside a source
            on_error.callback(store.close)
            source = cls(StateCache.open(store, vlm.model_id, kind=kind, preload=preload), vlm, radius, views, append,
                         **kwargs)
            on_error.pop_all()
        return source

    # ------------------------------------------------------------------ EmbeddingSource
    @property
    def image_size(self) -> int:
        return int(self.vlm.image_size)

    def __call__(self, states: np.ndarray, render: FrameRenderer) -> np.ndarray:
        return self.lookup(states, render).embeddings

    def lookup(self, states: np.ndarray, render: FrameRenderer) -> LiveLookup:
        """Embeddings of B states: cached for hits, rendered + embedded (+ appended) for misses."""
        states = np.asarray(states, dtype=np.float32)
        if states.ndim != 2:
            raise ConfigError(f"states must be [B, {self.key_spec.state_dim}], got shape {states.shape}")
        keys = self.cache.state_keys(states, self.key_spec)
        res, emb16 = self.cache.fetch(keys, self.radius, self.views)
        out = emb16.astype(np.float32)
        rows = res.rows.copy()
        miss = np.flatnonzero(~res.hit)
        if len(miss):
            frames = np.asarray(render(miss))
            if frames.ndim != 5 or frames.shape[:2] != (len(miss), len(self.views)):
                raise ConfigError(f"render returned frames of shape {frames.shape}; expected [{len(miss)}, {len(self.views)}, H, W, 3]")
            fresh = self._embedder.embed_frames(frames)
            if self.quantize:
                fresh = fresh.astype(np.float16).astype(np.float32)
            out[miss] = fresh
            if self.appender is not None:
                self.appender.submit(self._rows(states[miss], keys[miss]), fresh)  # counts what it drops
            elif self.append:
                rows[miss] = self._append(states[miss], keys[miss], frames, fresh)
        hits = np.flatnonzero(res.hit)
        self.stats.batches += 1
        self.stats.states += len(states)
        self.stats.hits += len(hits)
        self.stats.rendered += len(miss)
        self.stats.hit_distance_sum += float(res.distances[hits].sum())
        sources, counts = np.unique(np.asarray(getattr(res, "source", np.zeros(len(states), np.int64)))[hits],
                                    return_counts=True)
        for src, c in zip(sources.tolist(), counts.tolist()):
            self.stats.hits_by_source[src] = self.stats.hits_by_source.get(src, 0) + c
        self.stats.per_batch_hit_rate.append(res.hit_rate)
        if len(hits) and self.audit_every and self.audit_scorer is not None and self.stats.batches % self.audit_every == 0:
            self._audit(int(self._rng.choice(hits)), out, render)
        if self.append and self.appender is None and self.save_every and self.stats.batches % self.save_every == 0:
            self.cache.save()
        return LiveLookup(out, res.hit.copy(), rows, res.distances)

    def _audit(self, i: int, out: np.ndarray, render: FrameRenderer) -> None:
        """Render one hit fresh and record how far its cached score is from the fresh one."""
        fresh = self._embedder.embed_frames(np.asarray(render(np.array([i]))))
        pair = np.stack([out[i], fresh[0]])
        scores = np.asarray(self.audit_scorer(pair))
        self.stats.audited += 1
        self.stats.audit_abs_error_sum += float(np.abs(scores[0] - scores[1]).mean())

    def _rows(self, states: np.ndarray, keys: np.ndarray) -> dict[str, np.ndarray]:
        """Store rows of live states: no trajectory (episode LIVE_EPISODE, a running step)."""
        n = len(states)
        batch = {
            "state": states, "key": keys,
            "episode": np.full(n, LIVE_EPISODE, np.int64),
            "step": np.arange(self._live_step, self._live_step + n, dtype=np.int32),
            "phase_rule": np.asarray(self.phase_labels(states), dtype=np.int8),
            "success": np.zeros(n, bool),
            "difficulty": np.full(n, np.nan, np.float32),
        }
        self._live_step += n
        return batch

    # ------------------------------------------------------------------ appending
    def _append(self, states: np.ndarray, keys: np.ndarray, frames: np.ndarray, emb: np.ndarray) -> np.ndarray:
        store = self.store
        batch = self._rows(states, keys)
        if store.has_frames:
            if tuple(frames.shape[2:4]) != tuple(store.resolution):
                raise ConfigError(f"rendered frames are {frames.shape[2]}x{frames.shape[3]} but {store.path} stores "
                                  f"{store.resolution[0]}x{store.resolution[1]}; render at the store's resolution "
                                  "(RewardConfig.resolution) to append misses")
            batch["frames"] = frames
        added = store.append(batch, embeddings={self.cache.model_id: emb})
        rows = np.arange(added.start, added.stop, dtype=np.int64)
        # keys as stored (float32 round trip is exact): cache.add checks them against the store
        self.cache.add(keys, rows)
        self.stats.appended += len(states)
        return rows

    def save(self) -> None:
        """Persist the index (it is also rebuilt or extended from the store on the next open)."""
        if self.appender is not None:
            self.appender.flush()
            with self.cache.lock:
                self.cache.overlay.save()
        else:
            self.cache.save()

    def close(self) -> None:
        """Drain the background writer, persist the index if rows were appended, release the stores."""
        try:
            if self.appender is not None:
                self.appender.close()
            elif self.append and self.stats.appended:
                self.cache.save()
        finally:
            if hasattr(self.cache, "caches"):
                self.cache.close()
            else:
                self.store.close()

    def __enter__(self) -> CachedEmbeddingSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

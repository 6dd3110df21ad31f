"""The rmtl dataset store: one Zarr v3 group per dataset (layout: docs/storage.md).

:class:`DatasetStore` is the one entry point. This module creates, opens and closes a
store and says what it records; the store's other jobs are mixed in from:

- :mod:`storage.dataset_append`: appends and the commit protocol (why a killed writer
  never exposes half-written rows);
- :mod:`storage.dataset_read`: reading committed rows (a missing chunk file is damage);
- :mod:`storage.dataset_embeddings`: image, text and prompt-set embeddings;
- :mod:`storage.dataset_verify`: `verify` and the errors that name damaged chunks.

Creating and opening use :mod:`storage.dataset_open` (what is and is not a store, the
commit record), :mod:`storage.dataset_encoding` (codecs, integrity) and
:mod:`storage.dataset_describe` (dimension names, descriptions, coordinate arrays).
"""

from __future__ import annotations

import json
import os
import time
import uuid as uuidlib
from typing import Any, Literal
from collections.abc import Mapping, Sequence

import numpy as np
import zarr

from storage.dataset_append import StoreAppend
from storage.dataset_describe import described, write_coordinates
from storage.dataset_embeddings import StoreEmbeddings
# create() looks these up in this module, so a test can patch them here to write a store the
# way versions before checksums did (building its codecs from _COMPRESSOR).
from storage.dataset_encoding import CODECS as _CODECS, COMPRESSOR as _COMPRESSOR, INTEGRITY, WRITE_ALL as _WRITE_ALL  # noqa: F401
from storage.dataset_encoding import consolidate, json_ok
from storage.dataset_open import load_committed
from storage.dataset_read import StoreRead
from storage.dataset_verify import StoreVerify
from storage.errors import StoreError
from storage.key_spec import KeySpec
from storage.location import Location
from storage.lock import DEFAULT_TTL_S, WriterLock
from storage.schema import (
    COMMIT_ATTR,
    EMBEDDINGS_GROUP,
    FRAMES,
    FRAMES_DTYPE,
    INFO_ATTR,
    PROMPT_SETS_GROUP,
    ROW_FIELDS,
    SCHEMA_ATTR,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    STEP_FIELDS,
    TEXT_GROUP,
    Chunking,
)

ACTION_DIM = 4
"""Width of the action array of stores that did not record theirs (``action_dim`` absent)."""


class DatasetStore(StoreAppend, StoreRead, StoreEmbeddings, StoreVerify):
    """A dataset store opened for reading (mode 'r') or as its single writer (mode 'a').

    Use `DatasetStore.create(...)` for a new store and `DatasetStore.open(...)` for an
    existing one; close writers (or use `with`) to release the writer lock.
    """

    def __init__(self, loc: Location, mode: Literal["r", "a"], lock: WriterLock | None, key_spec: KeySpec | None = None):
        self._loc = loc
        self._mode = mode
        self._lock = lock
        self._zstore = loc.zarr_store(read_only=(mode == "r"))
        self._key_spec = key_spec
        """The key spec appends compute missing keys with (given by the creator or opener)."""
        self._load()
        if key_spec is not None:
            key_spec.check_store(self._info.get("key_spec"), str(loc))
        if mode == "a" and self._arrays["state"].metadata.dimension_names:
            # Stores made before coordinate arrays get them from their next writer (v1 stores,
            # whose arrays name no dimensions, gain nothing from them).
            if write_coordinates(self._group, self._info, self._write_config()):
                consolidate(self._zstore)

    # -- opening -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        views: Sequence[str],
        resolution: int | tuple[int, int],
        provenance: Mapping[str, Any] | None = None,
        frames: bool = True,
        visual_domain: bool | str | None = None,
        renderer: Mapping[str, Any] | None = None,
        seeds: Any = None,
        key_spec: KeySpec | None = None,
        layout: Mapping[str, Any] | None = None,
        state_dim: int | None = None,
        key_dim: int | None = None,
        action_dim: int = ACTION_DIM,
        chunking: Chunking = Chunking(),
        code: Mapping[str, Any] | None = None,
        overwrite: bool = False,
        lock_ttl_s: float = DEFAULT_TTL_S,
    ) -> DatasetStore:
        """Create a new, empty store and return it open for writing (mode 'a').

        views: camera view names in bank order (axis 1 of frames and embeddings).
        resolution: frame side in pixels, or (height, width).
        provenance: free-form JSON-serialisable record (policy, stages, command line, ...).
        frames=False makes a store of states and embeddings only (no `frames` array).
        renderer: the render settings and their ``renderer_id`` (frames of one renderer only).
        key_spec: the task's key over its state rows (state and key widths, recorded as
        `key_spec`; the state cache checks it); without one, state_dim and key_dim give the
        widths and every append must carry its keys. action_dim: the task's action width. layout: the task's description of its
        fields (recorded as `layout`). code: `code_version`, `git_commit`, `git_dirty` of the writer.
        """
        loc = Location(path)
        views = [str(v) for v in views]
        if not views or len(set(views)) != len(views):
            raise StoreError(f"views must be a non-empty list of distinct names, got {views}")
        h, w = (resolution, resolution) if isinstance(resolution, (int, np.integer)) else tuple(resolution)
        if int(h) < 1 or int(w) < 1:
            raise StoreError(f"resolution must be positive, got {resolution}")
        if key_spec is not None:
            if (state_dim, key_dim) not in ((None, None), (key_spec.state_dim, key_spec.key_dim)):
                raise StoreError(f"state_dim/key_dim {state_dim}/{key_dim} disagree with key spec {key_spec.id} "
                                 f"({key_spec.state_dim}/{key_spec.key_dim}); pass one or the other")
            state_dim, key_dim = key_spec.state_dim, key_spec.key_dim
        elif state_dim is None or key_dim is None:
            raise StoreError("a new store needs the task's key_spec, or both state_dim and key_dim")
        code = dict(code or {})
        info = {
            "uuid": uuidlib.uuid4().hex,
            "created": time.time(),
            "views": views,
            "resolution": [int(h), int(w)],
            "has_frames": bool(frames),
            "visual_domain": json_ok("visual_domain", visual_domain),
            "renderer": json_ok("renderer", dict(renderer)) if renderer is not None else None,
            "seeds": json_ok("seeds", seeds),
            "state_dim": int(state_dim),
            "key_dim": int(key_dim),
            "key_spec": key_spec.meta() if key_spec is not None else None,
            "action_dim": int(action_dim),
            "layout": json_ok("layout", dict(layout)) if layout is not None else None,
            "chunking": chunking.to_dict(),
            "code_version": code.get("code_version"),
            "git_commit": code.get("git_commit"),
            "git_dirty": code.get("git_dirty"),
            "provenance": json_ok("provenance", dict(provenance or {})),
            "integrity": dict(INTEGRITY),
        }

        lock = WriterLock(loc, lock_ttl_s)
        lock.acquire()  # before the existence check, so two creators cannot both pass it
        try:
            if not loc.is_empty_dir():
                if not overwrite:
                    raise StoreError(
                        f"{loc} already exists and is not empty; choose a new path, delete it first, or pass overwrite=True to replace it"
                    )
                loc.fs.rm(loc.path, recursive=True)
            zstore = loc.zarr_store(read_only=False)
            g = zarr.open_group(zstore, mode="w", attributes={SCHEMA_ATTR: {"name": SCHEMA_NAME, "version": SCHEMA_VERSION}, INFO_ATTR: info})
            rows = chunking.rows
            for name, dtype in {**ROW_FIELDS, **STEP_FIELDS}.items():
                tail = {"state": (int(state_dim),), "key": (int(key_dim),), "action": (int(action_dim),)}.get(name, ())
                g.create_array(name, shape=(0, *tail), chunks=(rows, *tail), dtype=dtype, compressors=_CODECS,
                               config=_WRITE_ALL, **described(name))
            if frames:
                fr = chunking.frame_rows_for(int(h), int(w))
                g.create_array(
                    FRAMES, shape=(0, len(views), int(h), int(w), 3), chunks=(fr, 1, int(h), int(w), 3),
                    dtype=FRAMES_DTYPE, compressors=_CODECS, config=_WRITE_ALL, **described(FRAMES),
                )
            g.create_group(EMBEDDINGS_GROUP)
            g.create_group(TEXT_GROUP)
            g.create_group(PROMPT_SETS_GROUP)
            write_coordinates(g, info, _WRITE_ALL)
            consolidate(zstore)
            # The commit attribute is written last: a store without it is an aborted create.
            zarr.open_group(zstore, mode="r+", use_consolidated=True).attrs[COMMIT_ATTR] = {"rows": 0, "embeddings": {}}
            return cls(loc, "a", lock, key_spec)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        mode: Literal["r", "a"] = "r",
        *,
        break_lock: bool = False,
        lock_ttl_s: float = DEFAULT_TTL_S,
        key_spec: KeySpec | None = None,
    ) -> DatasetStore:
        """Open an existing store for reading ('r') or as its single writer ('a').

        key_spec: the task's key spec, for appends that leave the keys to the store (it
        must match the store's recorded spec).

        A writer takes the lock `<path>.lock`; a live holder makes this fail with a line
        naming it, a dead one (pid gone on this host, or heartbeat older than lock_ttl_s)
        is taken over. break_lock=True takes the lock regardless.
        """
        if mode not in ("r", "a"):
            raise StoreError(f"mode must be 'r' (read) or 'a' (append), got {mode!r}")
        loc = Location(path)
        if mode == "r":
            return cls(loc, "r", None)
        cls(loc, "r", None)  # validate before leaving a lock file next to something foreign
        lock = WriterLock(loc, lock_ttl_s)
        lock.acquire(break_lock=break_lock)
        try:
            return cls(loc, "a", lock, key_spec)
        except BaseException:
            lock.release()
            raise

    def _load(self) -> None:
        """(Re)read metadata and the commit record, validating the store."""
        c = load_committed(self._loc, self._zstore, self._mode)
        self._group = c.group
        self._arrays = c.arrays
        self._chunks_seen: dict[str, set[int]] = {}
        """Chunk rows (first grid index) of each array whose chunk files were found (`_require_chunks`)."""
        self._info = c.info
        self._schema_version = c.version
        self._rows = c.rows
        self._emb_rows: dict[str, int] = c.emb_rows

    def refresh(self) -> None:
        """Re-read the commit record (readers: see rows committed since opening)."""
        if self._mode == "r":
            self._load()

    def close(self) -> None:
        """Release the writer lock (no-op for readers). Safe to call twice."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self._mode = "r"

    def __enter__(self) -> DatasetStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DatasetStore({self._loc}, mode={self._mode!r}, rows={self._rows}, models={self.model_ids()})"

    # -- properties ----------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._loc.url

    @property
    def location(self) -> Location:
        return self._loc

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def uuid(self) -> str:
        """Identity of this store, written once at creation (the cache checks it)."""
        return self._info["uuid"]

    @property
    def info(self) -> dict[str, Any]:
        """Creation attributes: views, resolution, visual_domain, seeds, provenance, ... (a copy)."""
        return json.loads(json.dumps(self._info))

    @property
    def schema_version(self) -> int:
        return self._schema_version

    @property
    def has_actions(self) -> bool:
        """Whether rows record their action and episode ends (schema v2 and later)."""
        return self._schema_version >= 2

    def _lacks_actions(self, what: str) -> StoreError:
        return StoreError(f"store {self._loc} has dataset schema v{self._schema_version}, which records no actions "
                          f"and no episode ends (terminated/truncated), so it cannot {what}; render the episodes "
                          f"into a new store with this rmtl (rmtl render-and-embed --store NEW_PATH)")

    def require_actions(self, what: str = "be replayed") -> None:
        """One-line StoreError when this store records no actions (``what``: what needed them)."""
        if not self.has_actions:
            raise self._lacks_actions(what)

    @property
    def views(self) -> list[str]:
        return list(self._info["views"])

    @property
    def renderer_id(self) -> str | None:
        """Id of the renderer that drew this store's frames (None: written before renderer ids)."""
        r = self._info.get("renderer") or {}
        return r.get("renderer_id")

    @property
    def resolution(self) -> tuple[int, int]:
        h, w = self._info["resolution"]
        return int(h), int(w)

    @property
    def has_frames(self) -> bool:
        return bool(self._info.get("has_frames"))

    @property
    def state_dim(self) -> int:
        return int(self._info["state_dim"])

    @property
    def key_dim(self) -> int:
        return int(self._info["key_dim"])

    @property
    def num_rows(self) -> int:
        """Committed rows (the only rows readers see)."""
        return self._rows

    def __len__(self) -> int:
        return self._rows

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        """{field: shape of one row} of this store's per-row arrays (what appends give, reads ask for)."""
        h, w = self.resolution
        shapes: dict[str, tuple[int, ...]] = {n: () for n in ROW_FIELDS}
        shapes["state"] = (self.state_dim,)
        shapes["key"] = (self.key_dim,)
        if self.has_actions:
            shapes.update({n: () for n in STEP_FIELDS}, action=(int(self._info.get("action_dim") or ACTION_DIM),))
        if self.has_frames:
            shapes[FRAMES] = (len(self.views), h, w, 3)
        return shapes

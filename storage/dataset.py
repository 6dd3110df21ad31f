"""The rmtl dataset store: one Zarr v3 group per dataset (layout: docs/storage.md).

Commit protocol (why a killed writer never exposes half-written rows): an append resizes
the arrays, writes the new rows, re-consolidates the metadata, and only then rewrites the
root attribute `rmtl_commit` with the new row count. Each of those metadata writes replaces
one object atomically (temp file + rename locally, one PUT on object stores). Readers
only ever look at rows below the committed count; a resumed writer starts at the
committed count and overwrites whatever a killed writer left past it, so rows are never
duplicated and never read back as zeros. One writer per store (storage.lock).

Layout, chunking and the reasons for them: docs/storage.md.
"""

from __future__ import annotations

import json
import os
import time
import uuid as uuidlib
import warnings
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Iterator, Literal, Mapping, Sequence

import numpy as np
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec

from storage.errors import StoreError
from storage.key_spec import KeySpec
from storage.location import Location
from storage.lock import DEFAULT_TTL_S, WriterLock
from storage.schema import (
    COMMIT_ATTR,
    COORDINATE_DESCRIPTION,
    COORDINATES,
    DESCRIPTIONS,
    DIMENSIONS,
    EMBEDDING_DESCRIPTION,
    EMBEDDING_DIMS,
    PROMPT_SET_DESCRIPTION,
    PROMPT_SET_DIMS,
    PROMPT_SETS_GROUP,
    STEP_DEFAULTS,
    STEP_FIELDS,
    TEXT_DESCRIPTION,
    TEXT_DIMS,
    EMBEDDING_DTYPE,
    EMBEDDINGS_GROUP,
    FRAMES,
    FRAMES_DTYPE,
    INFO_ATTR,
    ROW_FIELDS,
    SCHEMA_ATTR,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    TEXT_EMBEDDING_DTYPE,
    TEXT_GROUP,
    Chunking,
    model_node_name,
)

Rows = int | slice | Sequence[int] | np.ndarray | None

# zstd through blosc: fast enough to not slow rendering, and byte-shuffle helps the float arrays.
_COMPRESSOR = BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")
# Then a CRC-32C of the compressed bytes (zarr's crc32c codec): a flipped or truncated chunk
# fails its checksum on read instead of decoding to garbage.
_CODECS = (_COMPRESSOR, Crc32cCodec())
INTEGRITY = {"checksum": "crc32c", "all_chunks_written": True}
"""Recorded as `rmtl.integrity` by create: every chunk carries a CRC-32C and every chunk of
the committed rows is written, even when it holds only fill values, so a missing chunk file
is damage (older stores have no such record: `verify` then checks what it can)."""
_WRITE_ALL = {"write_empty_chunks": True}

MAKERS = "`rmtl render-and-embed` (or `rmtl bc-labels`)"
"""The commands that make dataset stores, for messages."""
_EXISTS_MAX = 16
"""Up to this many chunk files a read checks one by one; more: one listing of the array."""
VERIFY_HINT = "run `rmtl store verify {store}` to list every damaged chunk"


@dataclass(frozen=True)
class Damage:
    """One damaged part of a store found by `DatasetStore.verify` or a failing read."""

    array: str
    """Node path of the array ('frames', 'embeddings/<node>', ...)."""
    problem: str
    chunk: tuple[int, ...] | None = None
    """Chunk grid coordinates (None: the array's metadata)."""
    rows: tuple[int, int] | None = None
    """Store rows [start, stop) the chunk holds (text embeddings: prompt rows)."""
    view: str | None = None

    def describe(self) -> str:
        where = "metadata" if self.chunk is None else f"chunk {'.'.join(map(str, self.chunk))}"
        unit = ("prompts" if self.array.startswith((TEXT_GROUP + "/", PROMPT_SETS_GROUP + "/"))
                else "names" if self.array.rsplit("/", 1)[-1] in COORDINATES else "rows")
        rows = f" {unit} {self.rows[0]}-{self.rows[1] - 1}" if self.rows else ""
        view = f" view {self.view}" if self.view else ""
        return f"{self.array} {where}{rows}{view}: {self.problem}"


@dataclass
class VerifyReport:
    """What `DatasetStore.verify` checked and the damage it found."""

    store: str
    arrays: int = 0
    chunks: int = 0
    checksums: bool = False
    """Whether the store was created with checksums and all chunks written (see INTEGRITY)."""
    damage: list[Damage] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damage


def _reason(err: BaseException) -> str:
    text = " ".join(str(err).split())
    if "checksum do not match" in text:
        return "checksum mismatch (the chunk's bytes changed or it was truncated)"
    return f"{type(err).__name__}: {text[:160]}" if text else type(err).__name__


def _row_list(rows: np.ndarray, n: int = 4) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:n])
    return shown + (f", ... ({len(rows)} rows)" if len(rows) > n else "")


def _blosc_truncated(raw: bytes) -> str | None:
    """For a chunk ending in blosc (no checksum): a problem if its size disagrees with the
    compressed size in its blosc header (bytes 12-15), else None."""
    if len(raw) < 16:
        return f"chunk file is truncated ({len(raw)} bytes, shorter than a blosc header)"
    cbytes = int.from_bytes(raw[12:16], "little")
    if cbytes != len(raw):
        return f"chunk file has {len(raw)} bytes but its blosc header says {cbytes} (truncated or overwritten)"
    return None


def _consolidate(store: Any) -> None:
    with warnings.catch_warnings():
        # zarr warns that consolidated metadata is not in the v3 spec yet; we want it anyway.
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(store)


def _json_ok(name: str, value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as e:
        raise StoreError(f"{name} must be JSON-serialisable (plain dicts, lists, numbers, strings): {e}") from None


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


ACTION_DIM = 4
"""Width of the action array of stores that did not record theirs (``action_dim`` absent)."""


def _described(name: str, dims: tuple[str, ...] | None = None, description: str | None = None) -> dict[str, Any]:
    """create_array keywords: zarr v3 dimension_names and a description attribute."""
    return {"dimension_names": dims or DIMENSIONS[name],
            "attributes": {"description": description or DESCRIPTIONS[name]}}


def _coordinate_names(info: Mapping[str, Any]) -> dict[str, list[str]]:
    """{dimension: names along it} for the store's `COORDINATES`: the views, and the layout's
    field names where the layout gives one distinct name per column (custom layouts may not)."""
    widths = {"state_field": info.get("state_dim"), "key_field": info.get("key_dim"),
              "action_field": info.get("action_dim")}
    layout = info.get("layout") or {}
    out = {"view": [str(v) for v in info["views"]]}
    for dim, key in COORDINATES.items():
        names = layout.get(key) if key else None
        if (isinstance(names, list) and len(names) == widths[dim] and len(set(names)) == len(names)
                and all(isinstance(n, str) for n in names)):
            out[dim] = names
    return out


def _write_coordinates(group: Any, info: Mapping[str, Any], config: dict[str, Any] | None) -> list[str]:
    """Write the coordinate arrays a store lacks (root, and `view` in the embeddings group);
    returns the nodes written. Names are tiny: a checksum, no compression."""
    names = _coordinate_names(info)
    todo = [(dim, dim) for dim in names if dim not in group]
    if EMBEDDINGS_GROUP in group and "view" not in group[EMBEDDINGS_GROUP]:
        todo.append((f"{EMBEDDINGS_GROUP}/view", "view"))
    for node, dim in todo:
        values = names[dim]
        a = group.create_array(node, shape=(len(values),), chunks=(len(values),), dtype=str,
                               compressors=(Crc32cCodec(),), config=config, dimension_names=(dim,),
                               attributes={"description": COORDINATE_DESCRIPTION.format(dim=dim)})
        a[...] = np.array(values, dtype=object)
    return [node for node, _ in todo]


class DatasetStore:
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
            if _write_coordinates(self._group, self._info, self._write_config()):
                _consolidate(self._zstore)

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
            "visual_domain": _json_ok("visual_domain", visual_domain),
            "renderer": _json_ok("renderer", dict(renderer)) if renderer is not None else None,
            "seeds": _json_ok("seeds", seeds),
            "state_dim": int(state_dim),
            "key_dim": int(key_dim),
            "key_spec": key_spec.meta() if key_spec is not None else None,
            "action_dim": int(action_dim),
            "layout": _json_ok("layout", dict(layout)) if layout is not None else None,
            "chunking": chunking.to_dict(),
            "code_version": code.get("code_version"),
            "git_commit": code.get("git_commit"),
            "git_dirty": code.get("git_dirty"),
            "provenance": _json_ok("provenance", dict(provenance or {})),
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
                               config=_WRITE_ALL, **_described(name))
            if frames:
                fr = chunking.frame_rows_for(int(h), int(w))
                g.create_array(
                    FRAMES, shape=(0, len(views), int(h), int(w), 3), chunks=(fr, 1, int(h), int(w), 3),
                    dtype=FRAMES_DTYPE, compressors=_CODECS, config=_WRITE_ALL, **_described(FRAMES),
                )
            g.create_group(EMBEDDINGS_GROUP)
            g.create_group(TEXT_GROUP)
            g.create_group(PROMPT_SETS_GROUP)
            _write_coordinates(g, info, _WRITE_ALL)
            _consolidate(zstore)
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

    def _fail(self, what: str, fix: str) -> StoreError:
        return StoreError(f"{self._loc} {what}; {fix}")

    def _check_root_metadata(self) -> None:
        """Tell a foreign directory, a Zarr v2 store and a corrupt root ``zarr.json`` apart
        (zarr reports all three as 'no group here')."""
        loc = self._loc
        meta = f"{loc.path}/zarr.json"
        if not loc.fs.exists(meta):
            if loc.fs.isfile(loc.path):
                raise self._fail("is a file, not a dataset store (a directory)", f"point at a store made by {MAKERS}")
            if loc.fs.exists(f"{loc.path}/.zgroup") or loc.fs.exists(f"{loc.path}/.zarray"):
                raise self._fail("is a Zarr v2 store, not an rmtl dataset store (Zarr v3)", f"point at a store made by {MAKERS}")
            raise self._fail("is not a dataset store (no zarr.json in it)", f"point at a store made by {MAKERS}")
        try:
            root = json.loads(loc.fs.cat_file(meta))
        except (ValueError, UnicodeDecodeError) as e:
            raise self._fail(f"has corrupt metadata: its root {meta} is not valid JSON ({_reason(e)}; truncated?)",
                             "restore the store from a copy, or re-create it") from None
        except OSError as e:
            raise self._fail(f"cannot be read: {meta}: {e.strerror or e}", "check the path and its permissions") from None
        if isinstance(root, dict) and root.get("zarr_format") == 3 and (
                root.get("node_type") == "array" or SCHEMA_ATTR not in (root.get("attributes") or {})):
            outer = self._enclosing_store()
            if outer is not None:  # a node inside a store, e.g. <store>/state: not damage
                raise self._fail(f"is the {root['node_type']} '{loc.path[len(outer) + 1:]}' inside the dataset store "
                                 f"{outer}, not a store", f"pass the store's path: {outer}")
        if not isinstance(root, dict) or root.get("node_type") != "group" or root.get("zarr_format") != 3:
            raise self._fail(f"has corrupt metadata: its root {meta} does not describe a Zarr v3 group",
                             "restore the store from a copy, or re-create it")

    def _enclosing_store(self) -> str | None:
        """The path of the rmtl store this location lies inside (a few levels up), if any."""
        fs, path = self._loc.fs, self._loc.path.rstrip("/")
        for _ in range(4):  # embeddings/<model> is the deepest node a user would point at
            parent = path.rsplit("/", 1)[0] if "/" in path else ""
            if not parent or parent == path:
                return None
            path = parent
            try:
                attrs = json.loads(fs.cat_file(f"{path}/zarr.json")).get("attributes") or {}
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(attrs.get(SCHEMA_ATTR), dict):
                return path
        return None

    def _node(self, g: Any, node: str) -> Any:
        """Array ``node`` of group ``g``; KeyError if absent, a one-line StoreError if its
        metadata cannot be parsed."""
        try:
            return g[node]
        except KeyError:
            raise
        except Exception as e:
            raise self._fail(f"has corrupt metadata: array '{node}' ({self._loc.path}/{node}/zarr.json) cannot be "
                             f"read ({_reason(e)})", "restore the store from a copy, or re-create it") from None

    def _load(self) -> None:
        """(Re)read metadata and the commit record, validating the store."""
        loc = self._loc
        if not loc.exists():
            raise StoreError(f"no dataset store at {loc}; make one with `rmtl render-and-embed --store {loc}` "
                             f"(or check the path)")
        self._check_root_metadata()
        try:
            # The writer needs the true array shapes; readers use the consolidated copy.
            g = zarr.open_group(self._zstore, mode="r" if self._mode == "r" else "r+",
                                use_consolidated=False if self._mode == "a" else None)
        except Exception as e:  # zarr raises many types for "not a group here"
            raise self._fail(f"is not a readable Zarr v3 group ({_reason(e)})",
                             f"point at a store made by {MAKERS}, or restore it from a copy") from None
        attrs = g.attrs.asdict()
        schema = attrs.get(SCHEMA_ATTR)
        if not isinstance(schema, dict) or schema.get("name") != SCHEMA_NAME:
            raise self._fail("is a Zarr group but not an rmtl dataset store (no rmtl_schema attribute)",
                             f"point at a store made by {MAKERS}")
        version = schema.get("version")
        if not isinstance(version, int) or version < 1:
            raise self._fail(f"has an invalid schema version {version!r}", "the store is corrupt; re-create it")
        if version > SCHEMA_VERSION:
            raise self._fail(f"has dataset schema v{version}, newer than this rmtl reads (v{SCHEMA_VERSION})",
                             "upgrade rmtl to read it")
        commit = attrs.get(COMMIT_ATTR)
        info = attrs.get(INFO_ATTR)
        if commit is None:
            raise self._fail("is incomplete: its creation never committed (killed during create?)",
                             "delete it and create it again")
        if not isinstance(info, dict) or not isinstance(commit, dict) or not isinstance(commit.get("rows"), int):
            raise self._fail("has corrupt rmtl attributes", "re-create it or restore it from a copy")
        names = list(ROW_FIELDS) + ([FRAMES] if info.get("has_frames") else [])
        names += list(STEP_FIELDS) if version >= 2 else []  # v1 stores have no step arrays
        arrays: dict[str, Any] = {}
        missing = []
        for name in names:
            try:
                arrays[name] = self._node(g, name)
            except KeyError:
                missing.append(name)
                continue
            # Consolidated metadata would still list a deleted array (whose reads are then
            # all fill values): check its own metadata object exists.
            if not loc.fs.exists(f"{loc.path}/{name}/zarr.json"):
                missing.append(name)
        if missing:
            raise self._fail(f"is corrupt: missing arrays {', '.join(missing)}", "re-create it or restore it from a copy")
        rows = commit["rows"]
        for name, a in arrays.items():
            if a.shape[0] < rows:
                raise self._fail(f"is corrupt: {rows} rows are committed but array '{name}' holds {a.shape[0]}",
                                 "re-create it or restore it from a copy")
        emb_commit = dict(commit.get("embeddings") or {})
        for model_id, n in emb_commit.items():
            node = f"{EMBEDDINGS_GROUP}/{model_node_name(model_id)}"
            try:
                a = self._node(g, node)
            except KeyError:
                raise self._fail(f"is corrupt: embeddings of model '{model_id}' are committed but array '{node}' is missing",
                                 "re-create it or restore it from a copy") from None
            if a.shape[0] < n or n > rows:
                raise self._fail(f"is corrupt: {n} rows of '{model_id}' embeddings are committed but the array holds "
                                 f"{a.shape[0]} and the store {rows} rows", "re-create it or restore it from a copy")
            arrays[node] = a
        if self._mode == "a" and (info.get("integrity") or {}).get("all_chunks_written"):
            arrays = {k: a.with_config(_WRITE_ALL) for k, a in arrays.items()}
        self._group = g
        self._arrays = arrays
        self._chunks_seen: dict[str, set[int]] = {}
        """Chunk rows (first grid index) of each array whose chunk files were found (`_require_chunks`)."""
        self._info = info
        self._schema_version = version
        self._rows = rows
        self._emb_rows: dict[str, int] = emb_commit

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

    # -- writing -------------------------------------------------------------------------
    def _write_config(self) -> dict[str, Any] | None:
        return _WRITE_ALL if (self._info.get("integrity") or {}).get("all_chunks_written") else None

    def _require_writer(self) -> WriterLock:
        if self._mode != "a" or self._lock is None:
            raise StoreError(f"{self._loc} is open read-only; open it with DatasetStore.open(path, mode='a') to write")
        return self._lock

    def _commit(self, rows: int, emb_rows: Mapping[str, int]) -> None:
        _consolidate(self._zstore)
        root = zarr.open_group(self._zstore, mode="r+", use_consolidated=True)
        root.attrs[COMMIT_ATTR] = {"rows": int(rows), "embeddings": {k: int(v) for k, v in emb_rows.items()}}
        self._rows = int(rows)
        self._emb_rows = dict(emb_rows)

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        h, w = self.resolution
        shapes: dict[str, tuple[int, ...]] = {n: () for n in ROW_FIELDS}
        shapes["state"] = (self.state_dim,)
        shapes["key"] = (self.key_dim,)
        if self.has_actions:
            shapes.update({n: () for n in STEP_FIELDS}, action=(int(self._info.get("action_dim") or ACTION_DIM),))
        if self.has_frames:
            shapes[FRAMES] = (len(self.views), h, w, 3)
        return shapes

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

    # -- embeddings ----------------------------------------------------------------------
    @staticmethod
    def _emb_node(model_id: str) -> str:
        return f"{EMBEDDINGS_GROUP}/{model_node_name(model_id)}"

    def _check_embeddings(self, model_id: str, start: int, emb: Any) -> np.ndarray:
        if model_id not in self._emb_rows:
            raise StoreError(f"{self._loc} has no embeddings of model '{model_id}'; add the first batch with add_embeddings()")
        done = self._emb_rows[model_id]
        if start != done:
            raise StoreError(f"embeddings of '{model_id}' are committed up to row {done}; add rows from {done}, not {start}")
        e = np.asarray(emb)
        d = self._arrays[self._emb_node(model_id)].shape[2]
        if e.ndim != 3 or e.shape[1:] != (len(self.views), d):
            raise StoreError(f"embeddings of '{model_id}' must have shape (rows, {len(self.views)}, {d}), got {e.shape}")
        if not np.issubdtype(e.dtype, np.floating):
            raise StoreError(f"embeddings must be floating point, got {e.dtype}")
        return e.astype(EMBEDDING_DTYPE, copy=False)

    def add_embeddings(self, model_id: str, start_row: int, emb: Any, meta: Mapping[str, Any] | None = None) -> range:
        """Write per-view image embeddings [rows, V, D] of model_id for store rows from start_row.

        Embeddings are append-only per model and may lag the rows: start_row must equal
        `embedded_rows(model_id)` (resume from there after a crash) and the rows must be
        committed. meta (first call only): JSON record of the model (spec, image_size,
        normalised, ...); embed_dim is taken from emb.
        """
        lock = self._require_writer()
        node = self._emb_node(model_id)
        e = np.asarray(emb)
        stop = start_row + len(e)
        if stop > self._rows:
            raise StoreError(f"cannot embed rows {start_row}..{stop - 1}: only {self._rows} rows are committed")
        if model_id not in self._emb_rows:
            if e.ndim != 3 or e.shape[1] != len(self.views):
                raise StoreError(f"embeddings must have shape (rows, {len(self.views)} views, dim), got {e.shape}")
            other = [m for m in self._emb_rows if self._emb_node(m) == node]
            if other:
                raise StoreError(f"model id '{model_id}' maps to the same array as '{other[0]}'; use a distinct id")
            if node == f"{EMBEDDINGS_GROUP}/view":
                raise StoreError("model id 'view' is reserved (the embeddings group's view coordinate); use another id")
            rows = int(self._info["chunking"]["embedding_rows"])
            self._arrays[node] = self._group.create_array(
                node, shape=(0, len(self.views), e.shape[2]), chunks=(rows, len(self.views), e.shape[2]),
                dtype=EMBEDDING_DTYPE, compressors=_CODECS, fill_value=float("nan"), overwrite=True,
                config=self._write_config(),
                attributes={"model_id": model_id, "embed_dim": int(e.shape[2]), "views": self.views,
                            "meta": _json_ok("meta", dict(meta or {})),
                            "description": EMBEDDING_DESCRIPTION.format(model_id=model_id)},
                dimension_names=EMBEDDING_DIMS,
            )
            self._emb_rows[model_id] = 0
        e = self._check_embeddings(model_id, start_row, e)
        lock.heartbeat()
        if len(e):
            self._write_rows(node, start_row, e)
        self._commit(self._rows, {**self._emb_rows, model_id: stop})
        return range(start_row, stop)

    def model_ids(self) -> list[str]:
        """Models with (committed) embeddings in this store."""
        return sorted(self._emb_rows)

    def embedded_rows(self, model_id: str) -> int:
        """Rows [0, n) that have committed embeddings of model_id (0 if none)."""
        return int(self._emb_rows.get(model_id, 0))

    def embedding_info(self, model_id: str) -> dict[str, Any]:
        """{"model_id", "embed_dim", "views", "meta"} recorded with the model's embeddings."""
        return dict(self._emb_array(model_id).attrs.asdict())

    # -- text embeddings of prompt sets ---------------------------------------------------
    def set_prompt_set_embeddings(self, model_id: str, set_id: str, roles: Sequence[str], texts: Sequence[str],
                                  emb: Any, prompt_set: Mapping[str, Any]) -> None:
        """Store the text embeddings [R, D] of prompt set ``set_id`` by ``model_id``: one row per
        (role, phrasing) in ``roles``/``texts``; ``prompt_set`` is the set's JSON record.
        Written in place, like the text table (NaN until written; cheap to recompute)."""
        self._require_writer()
        mat = np.asarray(emb, dtype=np.float32)
        if mat.ndim != 2 or mat.shape[0] != len(roles) or len(roles) != len(texts) or not len(roles):
            raise StoreError(f"prompt set {set_id}: {len(roles)} roles, {len(texts)} texts and embeddings of shape "
                             f"{mat.shape} do not match")
        if model_id in self._emb_rows and mat.shape[1] != self._emb_array(model_id).shape[2]:
            raise StoreError(f"text embeddings of '{model_id}' have dimension {mat.shape[1]} but its image embeddings "
                             f"{self._emb_array(model_id).shape[2]}")
        record = _json_ok("prompt_set", dict(prompt_set))
        group = self._group.require_group(f"{PROMPT_SETS_GROUP}/{model_node_name(model_id)}")
        a = group.create_array(
            str(set_id), shape=mat.shape, chunks=mat.shape, dtype=TEXT_EMBEDDING_DTYPE, compressors=_CODECS,
            config=self._write_config(), fill_value=float("nan"), overwrite=True, dimension_names=PROMPT_SET_DIMS,
            attributes={"model_id": model_id, "prompt_set_id": str(set_id), "roles": list(roles), "texts": list(texts),
                        "prompt_set": record, "description": PROMPT_SET_DESCRIPTION.format(
                            name=record.get("name", set_id), set_id=set_id, model_id=model_id)},
        )
        a[...] = mat
        self._require_writer().heartbeat()
        self._commit(self._rows, self._emb_rows)

    def prompt_set_ids(self, model_id: str) -> list[str]:
        """Ids of the prompt sets with stored text embeddings of ``model_id``."""
        node = f"{PROMPT_SETS_GROUP}/{model_node_name(model_id)}"
        if PROMPT_SETS_GROUP not in self._group or node not in self._group:
            return []
        return sorted(name for name, _ in self._group[node].arrays())

    def prompt_set_embeddings(self, model_id: str, set_id: str) -> dict[str, Any]:
        """{"roles", "texts", "embeddings" (float32 [R, D]), "prompt_set", "model_id"} of a stored set."""
        if set_id not in self.prompt_set_ids(model_id):
            raise StoreError(f"{self._loc} has no text embeddings of prompt set {set_id} for '{model_id}'")
        node = f"{PROMPT_SETS_GROUP}/{model_node_name(model_id)}/{set_id}"
        a = self._group[node]
        try:
            mat = a[...]
        except Exception as e:
            raise self._damaged(node, a, (0, a.shape[0]), e) from None
        attrs = a.attrs.asdict()
        if mat.shape[0] != len(attrs["texts"]) or np.isnan(mat).any():
            raise StoreError(f"text embeddings of prompt set {set_id} for '{model_id}' in {self._loc} are incomplete; "
                             f"embed them again (rmtl embed-text)")
        return {"roles": list(attrs["roles"]), "texts": list(attrs["texts"]), "embeddings": mat,
                "prompt_set": attrs.get("prompt_set"), "model_id": attrs["model_id"]}

    def _emb_array(self, model_id: str) -> Any:
        if model_id not in self._emb_rows:
            raise StoreError(f"{self._loc} has no embeddings of model '{model_id}' (it has {self.model_ids() or 'none'})")
        return self._arrays[self._emb_node(model_id)]

    def embeddings(self, model_id: str, rows: Rows = None, views: Sequence[str] | None = None) -> np.ndarray:
        """float16 [rows, V, D] image embeddings of model_id (only rows with committed embeddings)."""
        a = self._emb_array(model_id)
        idx, squeeze = self._index(rows, self.embedded_rows(model_id), f"embedded rows of '{model_id}'")
        node = self._emb_node(model_id)
        out = self._take(node, idx, self._view_index(views))
        if out.size and np.isnan(out).any():  # committed embeddings are never NaN (the fill value)
            bad = np.flatnonzero(np.isnan(out).reshape(len(out), -1).any(axis=1))
            rows = np.arange(idx.start, idx.stop)[bad] if isinstance(idx, slice) else idx[bad]
            raise StoreError(f"store {self._loc} is damaged: embeddings of '{model_id}' ({node}) read back as NaN at "
                             f"committed rows {_row_list(rows)} (a chunk file is missing); "
                             f"{VERIFY_HINT.format(store=self._loc)}, then re-embed or restore the store from a copy")
        return out[0] if squeeze else out

    def set_text_embeddings(self, model_id: str, prompts: Mapping[str, Any]) -> None:
        """Store text embeddings {prompt: [D]} of model_id, merged with those already stored."""
        self._require_writer()
        merged = self.text_embeddings(model_id) if self._has_text(model_id) else {}
        merged.update({str(p): np.asarray(v, dtype=np.float32).reshape(-1) for p, v in prompts.items()})
        dims = {v.shape[0] for v in merged.values()}
        if len(dims) != 1:
            raise StoreError(f"text embeddings of '{model_id}' have mixed dimensions {sorted(dims)}")
        if model_id in self._emb_rows and dims != {self._emb_array(model_id).shape[2]}:
            raise StoreError(f"text embeddings of '{model_id}' have dimension {dims.pop()} but its image embeddings "
                             f"{self._emb_array(model_id).shape[2]}")
        mat = np.stack(list(merged.values()))
        # NaN fill: a write killed between metadata and data reads back as NaN, which
        # text_embeddings() rejects, instead of as plausible zeros.
        a = self._group.create_array(
            f"{TEXT_GROUP}/{model_node_name(model_id)}", shape=mat.shape, chunks=mat.shape,
            dtype=TEXT_EMBEDDING_DTYPE, compressors=_CODECS, fill_value=float("nan"), overwrite=True,
            config=self._write_config(),
            attributes={"model_id": model_id, "prompts": list(merged),
                        "description": TEXT_DESCRIPTION.format(model_id=model_id)},
            dimension_names=TEXT_DIMS,
        )
        a[...] = mat
        self._require_writer().heartbeat()
        self._commit(self._rows, self._emb_rows)

    def _has_text(self, model_id: str) -> bool:
        return f"{TEXT_GROUP}/{model_node_name(model_id)}" in self._group

    def text_models(self) -> list[str]:
        """Models with stored text embeddings."""
        return sorted(a.attrs["model_id"] for _, a in self._group[TEXT_GROUP].arrays())

    def text_embeddings(self, model_id: str) -> dict[str, np.ndarray]:
        """{prompt: float32 [D]} stored for model_id."""
        node = f"{TEXT_GROUP}/{model_node_name(model_id)}"
        try:
            a = self._group[node]
        except KeyError:
            raise StoreError(f"{self._loc} has no text embeddings of model '{model_id}'; "
                             f"store them with set_text_embeddings()") from None
        prompts = list(a.attrs["prompts"])
        try:
            mat = a[...]
        except Exception as e:
            raise self._damaged(node, a, (0, a.shape[0]), e) from None
        if mat.shape[0] != len(prompts) or np.isnan(mat).any():
            spec = (self.embedding_info(model_id).get("meta") or {}).get("spec", model_id) \
                if model_id in self._emb_rows else model_id
            raise StoreError(f"text embeddings of '{model_id}' in {self._loc} are incomplete (a write was cut short, "
                             f"or a chunk file is missing: {VERIFY_HINT.format(store=self._loc)}); embed them again: "
                             f"rmtl embed --store {self._loc} --model {spec}")
        return {p: mat[i] for i, p in enumerate(prompts)}

    # -- reading -------------------------------------------------------------------------
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

    def _row_limit(self, node: str, stop: int) -> int:
        """The committed rows of array `node` (text tables: their prompts), at least `stop`."""
        if node.startswith((TEXT_GROUP + "/", PROMPT_SETS_GROUP + "/")):
            limit = int(self._group[node].shape[0])
        elif node.startswith(EMBEDDINGS_GROUP + "/"):
            limit = max((n for m, n in self._emb_rows.items() if self._emb_node(m) == node), default=stop)
        else:
            limit = self._rows
        return max(limit, stop)

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
        if len(keys) <= _EXISTS_MAX:  # a few look-ups beat listing a big array's every chunk
            present = fs.exists
        else:
            present = set(fs.find(f"{self._loc.path}/{node}")).__contains__
        for coords, key in keys:
            if not present(key):
                limit = self._row_limit(node, 0)
                view = self.views[coords[1]] if node == FRAMES and coords[1] < len(self.views) else None
                bad = Damage(node, "chunk file is missing (it would read as fill values)", coords,
                             (coords[0] * c0, min((coords[0] + 1) * c0, limit)), view)
                raise StoreError(f"store {self._loc} is damaged: cannot read {bad.describe()}; "
                                 f"{VERIFY_HINT.format(store=self._loc)}, then restore the store from a copy "
                                 f"or re-create it")
        seen.update(todo)

    def _check_chunks(self, node: str, a: Any, start: int, stop: int, limit: int, missing: bool,
                      report: VerifyReport | None = None) -> Iterator[Damage]:
        """Read and decode every chunk of array `node` holding rows [start, stop); yield the
        damaged ones (rows reported up to `limit`). missing: a missing chunk file is damage
        (stores that write every chunk); else it reads as fill values, as zarr means it."""
        if stop <= start:
            return
        c0 = int(a.chunks[0])
        rest = [range(-(-int(n) // int(c))) for n, c in zip(a.shape[1:], a.chunks[1:])]
        crc = any(isinstance(c, Crc32cCodec) for c in a.compressors)
        blosc = bool(a.compressors) and isinstance(a.compressors[-1], BloscCodec)
        fs = self._loc.fs
        for i in range(start // c0, -(-stop // c0)):
            rows = (i * c0, min((i + 1) * c0, limit))
            for tail in product(*rest):
                coords = (i, *tail)
                view = self.views[tail[0]] if node == FRAMES and tail and tail[0] < len(self.views) else None
                key = f"{self._loc.path}/{node}/{a.metadata.encode_chunk_key(coords)}"
                if report is not None:
                    report.chunks += 1
                if crc:
                    if missing and not fs.exists(key):
                        yield Damage(node, "chunk file is missing", coords, rows, view)
                        continue
                else:  # no checksum: at least catch a truncated blosc chunk before decoding it
                    try:
                        raw = fs.cat_file(key)
                    except FileNotFoundError:
                        if missing:
                            yield Damage(node, "chunk file is missing", coords, rows, view)
                        continue
                    problem = _blosc_truncated(raw) if blosc else None
                    if problem:
                        yield Damage(node, problem, coords, rows, view)
                        continue
                try:
                    a.get_block_selection(coords)
                except Exception as e:
                    yield Damage(node, _reason(e), coords, rows, view)

    def verify(self) -> VerifyReport:
        """Read and decode every chunk of the committed rows of every array (frames, per-row
        fields, each model's embeddings, text embeddings) and check each array's metadata;
        returns a report naming each damaged chunk (array, chunk, rows). Stores made with
        `INTEGRITY` (checksums) detect any changed or truncated chunk and missing chunk
        files; older stores detect what fails to decode and truncated blosc chunks."""
        integrity = self._info.get("integrity") or {}
        report = VerifyReport(str(self._loc), checksums=bool(integrity.get("checksum")))
        missing = bool(integrity.get("all_chunks_written"))
        targets = [(n, a, self._rows) for n, a in self._arrays.items() if not n.startswith(EMBEDDINGS_GROUP + "/")]
        targets += [(self._emb_node(m), self._arrays[self._emb_node(m)], n) for m, n in sorted(self._emb_rows.items())]
        for node in [*COORDINATES, f"{EMBEDDINGS_GROUP}/view"]:
            if node in self._group:
                a = self._group[node]
                targets.append((node, a, int(a.shape[0])))
        for name, a in sorted(self._group[TEXT_GROUP].arrays()):
            targets.append((f"{TEXT_GROUP}/{name}", a, int(a.shape[0])))
        if PROMPT_SETS_GROUP in self._group:
            for model, group in sorted(self._group[PROMPT_SETS_GROUP].groups()):
                for name, a in sorted(group.arrays()):
                    targets.append((f"{PROMPT_SETS_GROUP}/{model}/{name}", a, int(a.shape[0])))
        for node, a, n in targets:
            report.arrays += 1
            meta = f"{self._loc.path}/{node}/zarr.json"
            try:
                own = json.loads(self._loc.fs.cat_file(meta))
                shape = own["shape"]
            except FileNotFoundError:
                report.damage.append(Damage(node, f"metadata file {meta} is missing"))
                continue
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
                report.damage.append(Damage(node, f"metadata file {meta} is corrupt ({_reason(e)})"))
                continue
            if not shape or int(shape[0]) < n:
                report.damage.append(Damage(node, f"metadata file {meta} lists shape {shape} but {n} rows are committed"))
            report.damage.extend(self._check_chunks(node, a, 0, n, n, missing, report))
        return report

    def _damaged(self, node: str, a: Any, span: tuple[int, int], err: BaseException) -> StoreError:
        """The one-line error for a failed read of rows [span) of `node`: names the first
        damaged chunk found among those rows (or the rows, if every chunk reads alone)."""
        bad = next(iter(self._check_chunks(node, a, span[0], span[1], self._row_limit(node, span[1]), missing=False)),
                   None)
        what = bad.describe() if bad else f"{node} rows {span[0]}-{span[1] - 1}: {_reason(err)}"
        return StoreError(f"store {self._loc} is damaged: cannot read {what}; "
                          f"{VERIFY_HINT.format(store=self._loc)}, then restore the store from a copy or re-create it")

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

    def episodes(self) -> dict[int, np.ndarray]:
        """{episode id: its committed row indices in step order}."""
        cols = self.read(fields=["episode", "step"])
        ep, st = cols["episode"], cols["step"]
        order = np.lexsort((st, ep))
        ids, starts = np.unique(ep[order], return_index=True)
        return {int(i): rows for i, rows in zip(ids, np.split(order, starts[1:]))} if len(ep) else {}

"""Opening a dataset store: telling a store apart from a foreign directory, a Zarr v2 store,
a node inside a store and a corrupt root, and reading and checking its schema and commit
record (docs/storage.md, "Errors")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import zarr

from storage.dataset_encoding import WRITE_ALL
from storage.dataset_verify import reason
from storage.errors import StoreError
from storage.location import Location
from storage.schema import (
    COMMIT_ATTR,
    EMBEDDINGS_GROUP,
    FRAMES,
    INFO_ATTR,
    ROW_FIELDS,
    SCHEMA_ATTR,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    STEP_FIELDS,
    model_node_name,
)

MAKERS = "`rmtl render-and-embed` (or `rmtl bc-labels`)"
"""The commands that make dataset stores, for messages."""


@dataclass
class Committed:
    """What opening read from a valid store: its root group, the arrays readers may use
    (their committed rows checked against the arrays), its creation record, schema version
    and commit counts."""

    group: Any
    arrays: dict[str, Any]
    info: dict[str, Any]
    version: int
    rows: int
    emb_rows: dict[str, int]


def _fail(loc: Location, what: str, fix: str) -> StoreError:
    return StoreError(f"{loc} {what}; {fix}")


def _check_root_metadata(loc: Location) -> None:
    """Tell a foreign directory, a Zarr v2 store and a corrupt root ``zarr.json`` apart
    (zarr reports all three as 'no group here')."""
    meta = f"{loc.path}/zarr.json"
    if not loc.fs.exists(meta):
        if loc.fs.isfile(loc.path):
            raise _fail(loc, "is a file, not a dataset store (a directory)", f"point at a store made by {MAKERS}")
        if loc.fs.exists(f"{loc.path}/.zgroup") or loc.fs.exists(f"{loc.path}/.zarray"):
            raise _fail(loc, "is a Zarr v2 store, not an rmtl dataset store (Zarr v3)", f"point at a store made by {MAKERS}")
        raise _fail(loc, "is not a dataset store (no zarr.json in it)", f"point at a store made by {MAKERS}")
    try:
        root = json.loads(loc.fs.cat_file(meta))
    except (ValueError, UnicodeDecodeError) as e:
        raise _fail(loc, f"has corrupt metadata: its root {meta} is not valid JSON ({reason(e)}; truncated?)",
                    "restore the store from a copy, or re-create it") from None
    except OSError as e:
        raise _fail(loc, f"cannot be read: {meta}: {e.strerror or e}", "check the path and its permissions") from None
    if isinstance(root, dict) and root.get("zarr_format") == 3 and (
            root.get("node_type") == "array" or SCHEMA_ATTR not in (root.get("attributes") or {})):
        outer = _enclosing_store(loc)
        if outer is not None:  # a node inside a store, e.g. <store>/state: not damage
            raise _fail(loc, f"is the {root['node_type']} '{loc.path[len(outer) + 1:]}' inside the dataset store "
                        f"{outer}, not a store", f"pass the store's path: {outer}")
    if not isinstance(root, dict) or root.get("node_type") != "group" or root.get("zarr_format") != 3:
        raise _fail(loc, f"has corrupt metadata: its root {meta} does not describe a Zarr v3 group",
                    "restore the store from a copy, or re-create it")


def _enclosing_store(loc: Location) -> str | None:
    """The path of the rmtl store this location lies inside (a few levels up), if any."""
    fs, path = loc.fs, loc.path.rstrip("/")
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


def _node(loc: Location, g: Any, node: str) -> Any:
    """Array ``node`` of group ``g``; KeyError if absent, a one-line StoreError if its
    metadata cannot be parsed."""
    try:
        return g[node]
    except KeyError:
        raise
    except Exception as e:
        raise _fail(loc, f"has corrupt metadata: array '{node}' ({loc.path}/{node}/zarr.json) cannot be "
                    f"read ({reason(e)})", "restore the store from a copy, or re-create it") from None


def _creatable(loc: Location) -> bool:
    """Whether a store could be made at a local ``loc``: its nearest existing ancestor is a
    directory this process may write (remote addresses: assumed so)."""
    import os
    from pathlib import Path

    if not loc.is_local:
        return True
    p = Path(loc.path).parent
    while not p.exists() and p != p.parent:
        p = p.parent
    return p.is_dir() and os.access(p, os.W_OK | os.X_OK)


def load_committed(loc: Location, zstore: Any, mode: Literal["r", "a"]) -> Committed:
    """Read the metadata and the commit record of the store at `loc`, validating the store."""
    g = _open_group(loc, zstore, mode)
    attrs = g.attrs.asdict()
    version = _schema_version(loc, attrs)
    commit = attrs.get(COMMIT_ATTR)
    info = attrs.get(INFO_ATTR)
    if commit is None:
        raise _fail(loc, "is incomplete: its creation never committed (killed during create?)",
                    "delete it and create it again")
    if not isinstance(info, dict) or not isinstance(commit, dict) or not isinstance(commit.get("rows"), int):
        raise _fail(loc, "has corrupt rmtl attributes", "re-create it or restore it from a copy")
    rows = commit["rows"]
    arrays = _row_arrays(loc, g, info, version, rows)
    emb_commit = dict(commit.get("embeddings") or {})
    arrays.update(_embedding_arrays(loc, g, emb_commit, rows))
    if mode == "a" and (info.get("integrity") or {}).get("all_chunks_written"):
        arrays = {k: a.with_config(WRITE_ALL) for k, a in arrays.items()}
    return Committed(g, arrays, info, version, rows, emb_commit)


def _open_group(loc: Location, zstore: Any, mode: Literal["r", "a"]) -> Any:
    """The store's root group (one line when nothing is there or it is no Zarr v3 group)."""
    if not loc.exists():
        if not _creatable(loc):  # render-and-embed could not make one there either: no command to suggest
            raise StoreError(f"no dataset store at {loc}, and none can be made there (no writable directory "
                             f"above it); check the path")
        raise StoreError(f"no dataset store at {loc}; make one with `rmtl render-and-embed --store {loc}` "
                         f"(or check the path)")
    _check_root_metadata(loc)
    try:
        # The writer needs the true array shapes; readers use the consolidated copy.
        return zarr.open_group(zstore, mode="r" if mode == "r" else "r+",
                               use_consolidated=False if mode == "a" else None)
    except Exception as e:  # zarr raises many types for "not a group here"
        raise _fail(loc, f"is not a readable Zarr v3 group ({reason(e)})",
                    f"point at a store made by {MAKERS}, or restore it from a copy") from None


def _schema_version(loc: Location, attrs: dict[str, Any]) -> int:
    """The store's schema version: an rmtl dataset store's, one this rmtl reads."""
    schema = attrs.get(SCHEMA_ATTR)
    if not isinstance(schema, dict) or schema.get("name") != SCHEMA_NAME:
        raise _fail(loc, "is a Zarr group but not an rmtl dataset store (no rmtl_schema attribute)",
                    f"point at a store made by {MAKERS}")
    version = schema.get("version")
    if not isinstance(version, int) or version < 1:
        raise _fail(loc, f"has an invalid schema version {version!r}", "the store is corrupt; re-create it")
    if version > SCHEMA_VERSION:
        raise _fail(loc, f"has dataset schema v{version}, newer than this rmtl reads (v{SCHEMA_VERSION})",
                    "upgrade rmtl to read it")
    return version


def _row_arrays(loc: Location, g: Any, info: dict[str, Any], version: int, rows: int) -> dict[str, Any]:
    """The per-row arrays (and frames, and v2's step arrays), each present and holding the committed rows."""
    names = list(ROW_FIELDS) + ([FRAMES] if info.get("has_frames") else [])
    names += list(STEP_FIELDS) if version >= 2 else []  # v1 stores have no step arrays
    arrays: dict[str, Any] = {}
    missing = []
    for name in names:
        try:
            arrays[name] = _node(loc, g, name)
        except KeyError:
            missing.append(name)
            continue
        # Consolidated metadata would still list a deleted array (whose reads are then
        # all fill values): check its own metadata object exists.
        if not loc.fs.exists(f"{loc.path}/{name}/zarr.json"):
            missing.append(name)
    if missing:
        raise _fail(loc, f"is corrupt: missing arrays {', '.join(missing)}", "re-create it or restore it from a copy")
    for name, a in arrays.items():
        if a.shape[0] < rows:
            raise _fail(loc, f"is corrupt: {rows} rows are committed but array '{name}' holds {a.shape[0]}",
                        "re-create it or restore it from a copy")
    return arrays


def _embedding_arrays(loc: Location, g: Any, emb_commit: dict[str, Any], rows: int) -> dict[str, Any]:
    """The committed embedding arrays by node path, each present and holding its committed rows."""
    arrays: dict[str, Any] = {}
    for model_id, n in emb_commit.items():
        node = f"{EMBEDDINGS_GROUP}/{model_node_name(model_id)}"
        try:
            a = _node(loc, g, node)
        except KeyError:
            raise _fail(loc, f"is corrupt: embeddings of model '{model_id}' are committed but array '{node}' is missing",
                        "re-create it or restore it from a copy") from None
        if a.shape[0] < n or n > rows:
            raise _fail(loc, f"is corrupt: {n} rows of '{model_id}' embeddings are committed but the array holds "
                        f"{a.shape[0]} and the store {rows} rows", "re-create it or restore it from a copy")
        arrays[node] = a
    return arrays

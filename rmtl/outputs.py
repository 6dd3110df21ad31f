"""Who owns an output path: one rule for every command that writes a folder (docs/errors.md,
"What an output may replace").

:func:`what_is` names what this project recognises at a path (a dataset store, a store's FAISS
cache or records, a Stage-1 or Stage-2 run, a reward model or a ``train-reward-vlm`` run, an
export, a file, a folder of other files), reading a few small files only (no Zarr, no torch).
The checks built on it:

- :func:`write_manifest`: an export records, when it writes its dataset, what it wrote: the kind,
  the command, and every file (relative path, size, modification time, SHA-256) in its manifest,
  :data:`MARKER`, at the dataset's top;
- :func:`check_replaceable`: ``--overwrite`` of an export may replace only an export of the same
  kind that this project wrote, and only while the folder holds exactly what its manifest lists
  (an export written before manifests: only the files of its layout); a folder that holds anything
  else (a file the export did not write, a listed file that changed, a store, a run, a model or a
  cache at any depth) is refused in one line naming the first such path;
- :func:`check_writable_into`: a command that writes into a folder (a run, a model, a report) may
  use an empty or new folder, a folder of its own kind, or a folder of other files; never a store,
  a cache, an export, a model or a run of another kind, nor a place inside a store, a cache or an
  export.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rmtl.errors import ConfigError

MARKER = ".rmtl-output.json"
"""The manifest an export writes at its top: ``{"kind": "lerobot"|"minari", "written_by", "command",
"written_at", "manifest": 1, "files": {relative path: {"size", "mtime_ns", "sha256"}}, ...}``. Exports
written before manifests have ``kind`` and ``written_by`` only (or no marker at all)."""

MANIFEST_VERSION = 1
"""The manifest's ``manifest`` field: the version of its ``files`` record."""

EXPORT_NAMES = {"lerobot": "LeRobot dataset", "minari": "Minari dataset"}
"""Export kinds and how messages name them."""

_SCHEMA_ATTR = "rmtl_schema"
"""The root attribute of a dataset store (storage.schema.SCHEMA_ATTR; not imported: storage loads Zarr)."""
_BESIDE = {".cache": "the FAISS cache", ".runs": "the run records", ".analysis": "the analysis results",
           ".lock": "the lock"}
"""Folders kept beside a store (``<store>.cache`` ...) and what they are."""
_RUN_MARKERS = ("run.json", "summary.json", "selection.json", "eval.csv", "curriculum.csv", "validation.csv",
                "manager.csv", "resume", "best", "final", "checkpoints")
"""What shows that a folder holds a learner run (rmtl.train.run.run_dir.RUN_MARKERS, besides config.yaml)."""
_MODEL_FILES = ("open_clip_config.json", "open_clip_model.safetensors", "open_clip_pytorch_model.bin")
_VLM_RUN_FILES = ("checkpoint.pt", "caption_bank.pt", "train_log.csv")
_EXPORT_LAYOUT = {"lerobot": {"meta", "data", "videos", MARKER}, "minari": {"data", MARKER}}
"""The top-level entries of an export: a folder with anything else is not only an export."""
_LEGACY_FILES = {
    "lerobot": ("meta/info.json", "meta/stats.json", "meta/tasks.parquet", "meta/episodes/chunk-*/file-*.parquet",
                "data/chunk-*/file-*.parquet", "videos/observation.images.*/chunk-*/file-*.mp4"),
    "minari": ("data/metadata.json", "data/main_data.hdf5", "data/episode_id=*"),
}
"""The files an export written before manifests can hold (paths relative to its top, fnmatch patterns):
what ``--overwrite`` may delete of one; anything else in it is refused."""
_HELD = ("store", "zarr", "beside-store", "stage1-run", "stage2-run", "vlm-run", "model", "export:lerobot",
         "export:minari")
"""Kinds that, found anywhere inside an output, make replacing the output refused."""


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _zarr_root(path: Path) -> str | None:
    """'store' (an rmtl dataset store), 'zarr' (another Zarr group or array) or None."""
    if (path / ".zgroup").is_file() or (path / ".zarray").is_file():
        return "zarr"
    if not (path / "zarr.json").is_file():
        return None
    root = _json(path / "zarr.json")
    attrs = root.get("attributes") if isinstance(root, dict) else None
    return "store" if isinstance(attrs, dict) and _SCHEMA_ATTR in attrs else "zarr"


def _enclosing_store(path: Path) -> Path | None:
    for parent in path.parents:
        if _zarr_root(parent) == "store":
            return parent
    return None


def _manifest(path: Path) -> dict[str, Any] | None:
    """The export manifest at ``path`` (its marker with a ``files`` record), else None."""
    marker = _json(path / MARKER)
    if isinstance(marker, dict) and marker.get("kind") in EXPORT_NAMES and isinstance(marker.get("files"), dict):
        return marker
    return None


def _legacy_kind(path: Path) -> str | None:
    """The kind of an export written before the marker existed: its layout and record, and no other
    top-level entries; None otherwise."""
    info = _json(path / "meta" / "info.json")
    if isinstance(info, dict) and isinstance(info.get("rmtl"), dict) and "codebase_version" in info:
        return "lerobot" if {c.name for c in path.iterdir()} <= _EXPORT_LAYOUT["lerobot"] else None
    meta = _json(path / "data" / "metadata.json")
    if isinstance(meta, dict) and "rmtl" in (meta.get("author") or ()) and "dataset_id" in meta:
        return "minari" if {c.name for c in path.iterdir()} <= _EXPORT_LAYOUT["minari"] else None
    return None


def _export_kind(path: Path) -> str | None:
    """The kind of an export this project wrote at ``path`` (its marker; or, written before the
    marker, the layout and record of one), else None. Whether the folder still holds only what the
    export wrote is :func:`check_replaceable`'s question."""
    marker = _json(path / MARKER)
    if isinstance(marker, dict) and marker.get("kind") in EXPORT_NAMES:
        return str(marker["kind"])
    return _legacy_kind(path)


def _names(path: Path, limit: int = 3) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def what_is(path: str | os.PathLike[str]) -> tuple[str, str] | None:
    """``(kind, description)`` of what is at ``path``; None when nothing is there (or an empty folder).

    Kinds: ``file``, ``store``, ``zarr``, ``store-node`` (a node inside a store), ``beside-store``
    (a store's cache, records, analysis or lock folder), ``export:lerobot``, ``export:minari``,
    ``vlm-run`` (a ``train-reward-vlm`` output with its ``checkpoint.pt``), ``model`` (a reward
    model's weights without one), ``stage1-run``, ``stage2-run``, ``folder`` (other files)."""
    p = Path(path).expanduser().absolute()
    if not p.exists():
        return None
    if not p.is_dir():
        return "file", "a file"
    if _zarr_root(p) == "store":
        return "store", "a dataset store"
    outer = _enclosing_store(p)
    if outer is not None:
        return "store-node", f"a folder inside the dataset store {outer}"
    return _what_dir(p)


def _what_dir(p: Path) -> tuple[str, str] | None:
    """:func:`what_is` of a directory that lies in no store."""
    zarr = _zarr_root(p)
    if zarr == "store":
        return "store", "a dataset store"
    if zarr == "zarr":
        return "zarr", "a Zarr store (not written by rmtl)"
    for suffix, what in _BESIDE.items():
        if p.name.endswith(suffix) and _zarr_root(p.with_name(p.name[: -len(suffix)])) == "store":
            return "beside-store", f"{what} of the dataset store {p.with_name(p.name[: -len(suffix)])}"
    kind = _export_kind(p)
    if kind is not None:
        return f"export:{kind}", f"a {EXPORT_NAMES[kind]} exported by rmtl"
    if any((p / n).is_file() for n in _VLM_RUN_FILES) and (p / "checkpoint.pt").is_file():
        return "vlm-run", "a train-reward-vlm run (checkpoint.pt)"
    if any((p / n).is_file() for n in _MODEL_FILES):
        return "model", "a reward model (its weights and open_clip_config.json)"
    if any((p / n).exists() for n in _RUN_MARKERS) or any(
            n.name.startswith("progress_") and n.name.endswith(".csv") for n in p.iterdir()):
        stage2 = False
        try:
            import yaml

            cfg = yaml.safe_load((p / "config.yaml").read_text()) if (p / "config.yaml").is_file() else None
            stage2 = isinstance(cfg, dict) and "worker" in cfg
        except (OSError, ValueError, yaml.YAMLError):
            pass
        return ("stage2-run", "a Stage-2 run") if stage2 else ("stage1-run", "a Stage-1 run")
    if not any(p.iterdir()):
        return None
    stores = [c for c in p.iterdir() if c.is_dir() and _zarr_root(c) == "store"]
    held = f" (it holds the dataset store {stores[0]})" if stores else ""
    return "folder", f"a folder of other files ({_names(p)}){held}"


def _inside_owned(target: Path, what: str, fix: str) -> None:
    """One line if ``target`` lies inside a dataset store, a store's cache or records, or an export:
    nothing is written into what another command owns."""
    outer = _enclosing_store(target)
    if outer is not None:
        raise ConfigError(f"{what} {target} lies inside the dataset store {outer}; nothing is written into a store: {fix}")
    for parent in target.parents:
        owner = None
        for suffix, desc in _BESIDE.items():
            if parent.name.endswith(suffix) and _zarr_root(parent.with_name(parent.name[: -len(suffix)])) == "store":
                owner = f"{desc} of the dataset store {parent.with_name(parent.name[: -len(suffix)])}"
        kind = _export_kind(parent) if owner is None and parent.is_dir() else None
        if kind is not None:
            owner = f"a {EXPORT_NAMES[kind]} exported by rmtl ({parent})"
        if owner is not None:
            raise ConfigError(f"{what} {target} lies inside {owner}; nothing is written into it: {fix}")


def _walk(path: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    """``os.walk`` of ``path`` in sorted order, symbolic links not followed."""
    for top, dirs, files in os.walk(path, followlinks=False):
        dirs.sort()
        yield Path(top), dirs, sorted(files)


def _contained(path: Path) -> str | None:
    """A dataset store, a store's cache, a run, a model or an export anywhere inside ``path`` (at any
    depth), described; None if none."""
    for top, dirs, _ in _walk(path):
        for name in list(dirs):
            c = top / name
            if c.is_symlink():
                continue
            try:
                found = _what_dir(c)
            except OSError:  # unreadable: the walk does not enter it either
                continue
            if found and found[0] in _HELD:
                return f"{found[1]} at {c}"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_record(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _sha256(path)}


def _command_line(default: str) -> str:
    """The command line of this process when it is ``rmtl ...`` (else ``default``)."""
    import shlex
    import sys

    argv0 = Path(sys.argv[0] if sys.argv else "")
    if argv0.name == "rmtl" or (argv0.name == "__main__.py" and argv0.parent.name == "rmtl"):
        return shlex.join(["rmtl", *sys.argv[1:]])
    return default


def write_manifest(folder: str | os.PathLike[str], kind: str, **record: Any) -> dict[str, Any]:
    """Record in ``folder``'s manifest (:data:`MARKER`) what an export of ``kind`` wrote there: every file
    under it (relative path, size, modification time, SHA-256), the kind and the command; written last,
    when the dataset is whole and before it is swapped in. Returns the manifest."""
    root = Path(folder)
    files: dict[str, dict[str, Any]] = {}
    for top, _, names in _walk(root):
        for name in names:
            p = top / name
            rel = p.relative_to(root).as_posix()
            if rel != MARKER and not p.is_symlink():
                files[rel] = _file_record(p)
    written_by = f"rmtl export {kind}"
    manifest = {"kind": kind, "written_by": written_by, "command": _command_line(written_by), **record,
                "written_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "manifest": MANIFEST_VERSION, "files": files}
    (root / MARKER).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    return manifest


def _allowed_dirs(files: Iterable[str]) -> set[str]:
    dirs: set[str] = set()
    for rel in files:
        parts = rel.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return dirs


def _changed(path: Path, rec: Any) -> str | None:
    """Why the file at ``path`` is not the one its manifest record describes; None when it is."""
    if not isinstance(rec, dict):
        return "its manifest record is damaged"
    st = path.stat()
    if st.st_size != rec.get("size"):
        return f"{st.st_size} bytes, not the {rec.get('size')} its manifest records"
    if st.st_mtime_ns == rec.get("mtime_ns"):
        return None  # same size and time: unchanged (as rsync and make judge)
    if _sha256(path) != rec.get("sha256"):
        return "its content differs from the checksum its manifest records"
    return None


def _foreign(path: Path, kind: str) -> tuple[Path, str] | None:
    """The first path in the export at ``path`` that ``--overwrite`` must not delete, and why: one its
    manifest does not list (or, without a manifest, no file of an export's layout), a listed file that
    changed, a symbolic link; None when the folder holds only what the export wrote."""
    name = EXPORT_NAMES[kind]
    manifest = _manifest(path)
    files = manifest["files"] if manifest is not None else None
    dirs = _allowed_dirs(files) if files is not None else None
    unlisted = (f"which the {name} export there did not write (its manifest, {MARKER}, does not list it)"
                if files is not None else
                f"which is no part of a {name} export (written before exports kept a manifest: its known files only)")
    link = f"a symbolic link, which the {name} export there did not write"
    for top, subdirs, names in _walk(path):
        for entry in sorted([*subdirs, *names]):  # the first offending path in name order, level by level
            p = top / entry
            rel = p.relative_to(path).as_posix()
            if rel == MARKER:
                continue
            if p.is_symlink():
                return p, link
            if entry in subdirs:
                if dirs is not None and rel not in dirs:
                    return p, unlisted
                continue
            if files is None:
                if not any(fnmatch.fnmatch(rel, pat) for pat in _LEGACY_FILES[kind]):
                    return p, unlisted
                continue
            if rel not in files:
                return p, unlisted
            why = _changed(p, files[rel])
            if why is not None:
                return p, f"changed since the {name} export there wrote it ({why})"
    return None


def check_replaceable(target: str | os.PathLike[str], kind: str, *, overwrite: bool, what: str = "--out",
                      fix: str = "choose another --out") -> bool:
    """Before an export of ``kind`` ('lerobot', 'minari') writes ``target``: whether an earlier export
    is there to replace. One-line ConfigError if ``target`` is (or lies in) anything else; if it is an
    earlier export that holds a store, a run, a model, a cache or another export at any depth, anything
    its manifest does not list, or a listed file that changed; or if it is an earlier export and
    ``overwrite`` is off."""
    name = EXPORT_NAMES[kind]
    p = Path(target).expanduser().absolute()
    _inside_owned(p, what, fix)
    found = what_is(p)
    if found is None:
        return False
    if found[0] != f"export:{kind}":
        raise ConfigError(f"{what} {p} is {found[1]}, not a {name} exported by rmtl; an export replaces only an "
                          f"earlier export of its own (--overwrite never deletes anything else): {fix}")
    inside = _contained(p)
    if inside is not None:
        raise ConfigError(f"{what} {p} is {found[1]} that now also holds {inside}; --overwrite would delete it: "
                          f"move it out first, or {fix}")
    foreign = _foreign(p, kind)
    if foreign is not None:
        raise ConfigError(f"{what} {p} holds {foreign[0]}, {foreign[1]}; --overwrite deletes only what an export "
                          f"wrote, unchanged: move that out of the folder (or delete the folder yourself), or {fix}")
    if not overwrite:
        raise ConfigError(f"{p} already exists and is not empty ({found[1]}); {fix} or pass --overwrite to "
                          f"replace it")
    return True


def check_writable_into(path: str | os.PathLike[str], own: Iterable[str], what: str = "--out",
                        writes: str = "the output", fix: str = "choose another --out") -> tuple[str, str] | None:
    """Before a command writes ``writes`` into the folder ``path``: what is there (None: nothing);
    kinds in ``own`` (and a folder of other files) are accepted, anything else this project
    recognises is refused in one line, and so is a place inside a store, a store's cache or an export."""
    p = Path(path).expanduser().absolute()
    found = what_is(p)
    if found is None or found[0] in own or found[0] == "folder":
        _inside_owned(p, what, fix)
    if found is None:
        above = p.parent
        while not above.exists() and above != above.parent:
            above = above.parent
        if above.exists() and not above.is_dir():  # it could never be created
            raise ConfigError(f"{what} {p} cannot be created: {above} is a file, not a directory; {fix}")
        return None
    if found[0] in own or found[0] == "folder":
        return found
    if found[0] == "file":
        raise ConfigError(f"{what} {p} is a file, not a directory; {fix}")
    raise ConfigError(f"{what} {p} is {found[1]}; {writes} is never written into it: {fix}")

"""Who owns an output path: one rule for every command that writes a folder (docs/errors.md,
"What an output may replace").

:func:`what_is` names what this project recognises at a path (a dataset store, a store's FAISS
cache or records, a Stage-1 or Stage-2 run, a reward model or a ``train-reward-vlm`` run, an
export, a file, a folder of other files), reading a few small files only (no Zarr, no torch).
The checks built on it:

- :func:`check_replaceable`: ``--overwrite`` of an export may replace only an export of the same
  kind that this project wrote (its marker file :data:`MARKER`, or the layout of an export written
  before the marker existed); anything else is refused in one line naming what is there;
- :func:`check_writable_into`: a command that writes into a folder (a run, a model) may use an
  empty or new folder, a folder of its own kind, or a folder of other files; never a store, a
  cache, an export, a model or a run of another kind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from collections.abc import Iterable

from rmtl.errors import ConfigError

MARKER = ".rmtl-output.json"
"""The file an export writes at its top: ``{"kind": "lerobot"|"minari", "written_by": ...}``."""

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


def _export_kind(path: Path) -> str | None:
    """The kind of an export this project wrote at ``path`` (its marker; or, written before the
    marker, the layout and record of one), else None."""
    marker = _json(path / MARKER)
    if isinstance(marker, dict) and marker.get("kind") in EXPORT_NAMES:
        return str(marker["kind"])
    entries = {c.name for c in path.iterdir()}
    info = _json(path / "meta" / "info.json")
    if isinstance(info, dict) and isinstance(info.get("rmtl"), dict) and "codebase_version" in info:
        return "lerobot" if entries <= _EXPORT_LAYOUT["lerobot"] else None
    meta = _json(path / "data" / "metadata.json")
    if isinstance(meta, dict) and "rmtl" in (meta.get("author") or ()) and "dataset_id" in meta:
        return "minari" if entries <= _EXPORT_LAYOUT["minari"] else None
    return None


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
    zarr = _zarr_root(p)
    if zarr == "store":
        return "store", "a dataset store"
    outer = _enclosing_store(p)
    if outer is not None:
        return "store-node", f"a folder inside the dataset store {outer}"
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


def _inside_store(target: Path, what: str, fix: str) -> None:
    outer = _enclosing_store(target)
    if outer is not None:
        raise ConfigError(f"{what} {target} lies inside the dataset store {outer}; nothing is written into a store: {fix}")


def _contained(path: Path, depth: int = 3) -> str | None:
    """A dataset store, run or model inside ``path`` (a few levels down), described; None if none."""
    frontier = [path]
    for _ in range(depth):
        nxt = []
        for d in frontier:
            try:
                children = [c for c in d.iterdir() if c.is_dir() and not c.is_symlink()]
            except OSError:
                continue
            for c in children:
                found = what_is(c)
                if found and found[0] in ("store", "zarr", "stage1-run", "stage2-run", "vlm-run", "model"):
                    return f"{found[1]} at {c}"
                nxt.append(c)
        frontier = nxt
    return None


def check_replaceable(target: str | os.PathLike[str], kind: str, *, overwrite: bool, what: str = "--out",
                      fix: str = "choose another --out") -> bool:
    """Before an export of ``kind`` ('lerobot', 'minari') writes ``target``: whether an earlier export
    is there to replace. One-line ConfigError if ``target`` is (or lies in) anything else, or if it is
    an earlier export and ``overwrite`` is off."""
    name = EXPORT_NAMES[kind]
    p = Path(target).expanduser().absolute()
    _inside_store(p, what, fix)
    found = what_is(p)
    if found is None:
        return False
    if found[0] == f"export:{kind}":
        inside = _contained(p)
        if inside is not None:
            raise ConfigError(f"{what} {p} is {found[1]} that now also holds {inside}; --overwrite would delete it: "
                              f"move it out first, or {fix}")
        if not overwrite:
            raise ConfigError(f"{p} already exists and is not empty ({found[1]}); {fix} or pass --overwrite to "
                              f"replace it")
        return True
    raise ConfigError(f"{what} {p} is {found[1]}, not a {name} exported by rmtl; an export replaces only an earlier "
                      f"export of its own (--overwrite never deletes anything else): {fix}")


def check_writable_into(path: str | os.PathLike[str], own: Iterable[str], what: str = "--out",
                        writes: str = "the output", fix: str = "choose another --out") -> tuple[str, str] | None:
    """Before a command writes ``writes`` into the folder ``path``: what is there (None: nothing);
    kinds in ``own`` (and a folder of other files) are accepted, anything else this project
    recognises is refused in one line."""
    p = Path(path).expanduser().absolute()
    found = what_is(p)
    if found is None:
        _inside_store(p, what, fix)
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


def write_marker(folder: str | os.PathLike[str], kind: str, **record: Any) -> None:
    """Mark ``folder`` as an export of ``kind`` written by rmtl (:data:`MARKER`)."""
    (Path(folder) / MARKER).write_text(json.dumps({"kind": kind, "written_by": f"rmtl export {kind}", **record},
                                                  indent=1, default=str) + "\n")

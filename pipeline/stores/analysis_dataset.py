"""Analysis datasets: **Zarr v3 groups**, one per analysis, written whole (an analysis is
recomputed, never appended) into ``<store>.analysis/`` next to the store unless an
``out_dir`` is given, with the PNGs beside them. Every group's attributes record the source
store (path, uuid, committed rows), the model id, the prompts and alpha(s), so a dataset says
what it was computed from; :func:`read_dataset` loads one back as ``(arrays, attrs)``.
Layout: docs/analysis.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import numpy as np



def beside_store(store_path: str | os.PathLike[str], suffix: str) -> Path:
    """The local folder ``<store><suffix>`` for files a command writes about a store:
    next to a local store; for a store behind a URL, the same name under
    ``<data dir>/remote/<scheme>/`` (these are local files: PNGs, JSON, run records)."""
    from storage.location import Location

    loc = Location(store_path)
    if loc.is_local:
        return Path(loc.path + suffix)
    from rmtl.provenance import data_dir

    scheme = loc.url.split("://", 1)[0]
    return data_dir() / "remote" / scheme / (loc.path.strip("/") + suffix)


def default_out_dir(store: Any) -> Path:
    """``<store>.analysis`` (:func:`beside_store`)."""
    return beside_store(store.path, ".analysis")


def write_dataset(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> Path:
    """Write one analysis dataset as a Zarr v3 group (replacing any previous one)."""
    import json
    import warnings

    import zarr

    path = Path(path)
    g = zarr.open_group(str(path), mode="w", attributes=json.loads(json.dumps(dict(attrs), default=json_default)))
    for name, data in arrays.items():
        a = np.asarray(data)
        if a.dtype.kind not in "biuf":
            raise TypeError(f"analysis array {name!r} must be numeric or bool, got {a.dtype}")
        arr = g.create_array(name, shape=a.shape, dtype=a.dtype)
        if a.size:
            arr[...] = a
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))
    return path


def read_dataset(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """An analysis dataset written by this module: ({name: array}, attributes)."""
    import zarr

    g = zarr.open_group(str(path), mode="r")
    return {name: a[...] for name, a in g.arrays()}, g.attrs.asdict()


def json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")

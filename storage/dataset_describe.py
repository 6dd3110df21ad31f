"""What makes a dataset store self-describing to plain Zarr and xarray readers: dimension
names and a description on every array, and coordinate arrays holding the names along
the named dimensions (docs/storage.md, "Arrays")."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

import numpy as np
from zarr.codecs import Crc32cCodec

from storage.schema import COORDINATE_DESCRIPTION, COORDINATES, DESCRIPTIONS, DIMENSIONS, EMBEDDINGS_GROUP


def described(name: str, dims: tuple[str, ...] | None = None, description: str | None = None) -> dict[str, Any]:
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


def write_coordinates(group: Any, info: Mapping[str, Any], config: dict[str, Any] | None) -> list[str]:
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

"""On-disk formats: the Zarr dataset store and the FAISS state cache (docs/storage.md).

`import storage` stays cheap (no faiss, mujoco or torch): the cache is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from storage.dataset import DatasetStore
from storage.schema import SCHEMA_NAME, SCHEMA_VERSION, Chunking, model_node_name

if TYPE_CHECKING:
    from storage.cache import CacheLookup, StateCache, set_faiss_threads

__all__ = [
    "DatasetStore", "Chunking", "SCHEMA_NAME", "SCHEMA_VERSION", "model_node_name",
    "StateCache", "CacheLookup", "set_faiss_threads",
]


def __getattr__(name: str) -> Any:
    if name in ("StateCache", "CacheLookup", "set_faiss_threads"):
        from storage import cache

        return getattr(cache, name)
    raise AttributeError(f"module 'storage' has no attribute {name!r}")

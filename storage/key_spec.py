"""The cache key a task defines over its state rows, as the storage layer sees it.

Storage knows nothing about any robot: the task hands the writer (and the state cache) a
:class:`KeySpec` naming the key's dimensions and the function computing it from a state
row. A store records the spec's :meth:`KeySpec.meta` (attribute ``rmtl.key_spec``), and a
cache refuses to turn states into keys with a spec whose meta disagrees with the store's,
since its hits would then be nearest neighbours in another space.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

import numpy as np

from storage.errors import StoreError


@dataclass(frozen=True)
class KeySpec:
    """A versioned key layout: ``key(state [..., state_dim]) -> float32 [..., len(fields)]``.

    params: the constants the key depends on (scales, weights); they are recorded and
    compared with a store's, so changing one without bumping the version is still caught.
    """

    name: str
    version: int
    state_dim: int
    fields: tuple[str, ...]
    key_fn: Callable[[np.ndarray], np.ndarray] = field(compare=False, repr=False)
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """``<name>/v<version>``, the short form recorded in store and cache metadata."""
        return f"{self.name}/v{self.version}"

    @property
    def key_dim(self) -> int:
        return len(self.fields)

    def meta(self) -> dict[str, Any]:
        """The JSON record a store keeps of this spec."""
        return {"id": self.id, "name": self.name, "version": int(self.version), "state_dim": int(self.state_dim),
                "fields": list(self.fields), **{k: v for k, v in self.params.items()}}

    def matches(self, meta: Mapping[str, Any] | None) -> bool:
        """Whether keys recorded under ``meta`` are keys of this spec. Stores written before
        specs had ids recorded only the fields and the params; those still match by them."""
        if not isinstance(meta, Mapping):
            return False
        return (meta.get("id", self.id) == self.id and meta.get("fields") == list(self.fields)
                and all(meta.get(k) == v for k, v in self.params.items()))

    def keys(self, states: Any) -> np.ndarray:
        """Keys of states [..., state_dim] (float32 [..., key_dim])."""
        s = np.asarray(states)
        if s.shape[-1:] != (self.state_dim,):
            raise StoreError(f"key spec {self.id} expects states of dimension {self.state_dim}, got shape {s.shape}")
        return np.asarray(self.key_fn(s), dtype=np.float32)

    def check_store(self, meta: Mapping[str, Any] | None, where: str) -> None:
        """One-line StoreError unless a store's recorded key spec ``meta`` matches this one."""
        if not self.matches(meta):
            raise StoreError(f"{where} stores keys with layout {dict(meta) if isinstance(meta, Mapping) else meta} but "
                             f"this code computes {self.meta()}; rebuild the store's keys or use matching code")

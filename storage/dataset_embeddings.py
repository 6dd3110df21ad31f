"""Embeddings in a dataset store: per-view image embeddings of each model (append-only,
committed with the rows), text embeddings of prompts and of prompt sets (written in place)."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from storage.dataset_encoding import CODECS, json_ok
from storage.dataset_read import Rows
from storage.dataset_verify import VERIFY_HINT
from storage.errors import StoreError
from storage.schema import (
    EMBEDDING_DESCRIPTION,
    EMBEDDING_DIMS,
    EMBEDDING_DTYPE,
    EMBEDDINGS_GROUP,
    PROMPT_SET_DESCRIPTION,
    PROMPT_SET_DIMS,
    PROMPT_SETS_GROUP,
    TEXT_DESCRIPTION,
    TEXT_DIMS,
    TEXT_EMBEDDING_DTYPE,
    TEXT_GROUP,
    model_node_name,
)


def _row_list(rows: np.ndarray, n: int = 4) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:n])
    return shown + (f", ... ({len(rows)} rows)" if len(rows) > n else "")


class StoreEmbeddings:
    """The embeddings part of :class:`storage.dataset.DatasetStore` (a mixin over its state:
    location, group, arrays, commit counts, views)."""

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
                dtype=EMBEDDING_DTYPE, compressors=CODECS, fill_value=float("nan"), overwrite=True,
                config=self._write_config(),
                attributes={"model_id": model_id, "embed_dim": int(e.shape[2]), "views": self.views,
                            "meta": json_ok("meta", dict(meta or {})),
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
        record = json_ok("prompt_set", dict(prompt_set))
        group = self._group.require_group(f"{PROMPT_SETS_GROUP}/{model_node_name(model_id)}")
        a = group.create_array(
            str(set_id), shape=mat.shape, chunks=mat.shape, dtype=TEXT_EMBEDDING_DTYPE, compressors=CODECS,
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
        self._emb_array(model_id)  # refuses a model the store has no embeddings of
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
            dtype=TEXT_EMBEDDING_DTYPE, compressors=CODECS, fill_value=float("nan"), overwrite=True,
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

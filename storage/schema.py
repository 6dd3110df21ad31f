"""Schema of the rmtl dataset store: names, versions, per-row fields, chunking defaults.

Everything that decides the on-disk layout lives here, so docs/storage.md, the writer and
the validator agree. Bump SCHEMA_VERSION on any change an older reader would misread.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass

SCHEMA_NAME = "rmtl.dataset"
SCHEMA_VERSION = 2
"""v2 adds the per-row `action`, `terminated` and `truncated` arrays (STEP_FIELDS), the
`prompt_sets` group, and `dimension_names` and descriptions on every array. v1 stores
still open; they lack STEP_FIELDS (DatasetStore.require_actions says so)."""

SCHEMA_ATTR = "rmtl_schema"
"""Root attribute: {"name": SCHEMA_NAME, "version": int}."""
COMMIT_ATTR = "rmtl_commit"
"""Root attribute: {"rows": int, "embeddings": {model_id: int}}; written after the data."""
INFO_ATTR = "rmtl"
"""Root attribute: store uuid, views, resolution, provenance (see DatasetStore.create)."""

FRAMES = "frames"
EMBEDDINGS_GROUP = "embeddings"
TEXT_GROUP = "text_embeddings"
PROMPT_SETS_GROUP = "prompt_sets"
"""Text embeddings per model and prompt set: `prompt_sets/<model node>/<prompt-set id>` (v2)."""

ROW_FIELDS: dict[str, str] = {
    "state": "float32",
    "key": "float32",
    "episode": "int64",
    "step": "int32",
    "phase_rule": "int8",
    "success": "bool",
    "difficulty": "float32",
}
"""Per-row arrays every store has (besides optional `frames`), with their dtypes.
`state` is [N, state_dim], `key` is [N, key_dim], the rest are [N]."""

STEP_FIELDS: dict[str, str] = {
    "action": "float32",
    "terminated": "bool",
    "truncated": "bool",
}
"""Per-row arrays of schema v2: the action of the env step that ended in the row ([N,
action_dim], NaN on reset rows and rows appended without one) and that step's episode
ends. Optional in an append: absent, they are NaN / False."""
STEP_DEFAULTS = {"action": float("nan"), "terminated": False, "truncated": False}

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "state": ("row", "state_field"),
    "key": ("row", "key_field"),
    "episode": ("row",),
    "step": ("row",),
    "phase_rule": ("row",),
    "success": ("row",),
    "difficulty": ("row",),
    "action": ("row", "action_field"),
    "terminated": ("row",),
    "truncated": ("row",),
    FRAMES: ("row", "view", "height", "width", "channel"),
}
"""Zarr v3 `dimension_names` of the per-row arrays (xarray reads them)."""
EMBEDDING_DIMS = ("row", "view", "embed_dim")

COORDINATES: dict[str, str | None] = {
    "view": None,
    "state_field": "state_fields",
    "key_field": "key_fields",
    "action_field": "action_fields",
}
"""Label arrays, one per named dimension, each holding the names along it: xarray reads an
array named after its dimension as that dimension's coordinate, so ``ds.sel(view="front")``
and ``ds["state"].sel(state_field="cube_z")`` work on a plain ``xarray.open_zarr``. Values:
the key of the names in the ``layout`` record (None: the store's views). The ``view`` array
is also written into the ``embeddings`` group, whose arrays share that dimension."""
COORDINATE_DESCRIPTION = "names along dimension {dim} (an xarray coordinate)"
TEXT_DIMS = ("prompt", "embed_dim")
PROMPT_SET_DIMS = ("text", "embed_dim")

DESCRIPTIONS: dict[str, str] = {
    "state": "the task's state row (field names: rmtl.layout.state_fields)",
    "key": "state key of the state cache, computed from the state by the task's key spec (rmtl.key_spec)",
    "episode": "episode id (-1: a live-cache row outside any trajectory)",
    "step": "env step of the episode the row is in (0: the reset state)",
    "phase_rule": "rule phase the env reported (rmtl.layout.phase_codes); the Stage-2 BC label",
    "success": "the env's is_success after the step that ended in this row",
    "difficulty": "start difficulty u of the episode (0 easy, 1 random start)",
    "action": "action of the env step that ended in this row, as applied (clipped to [-1, 1]); NaN on reset rows",
    "terminated": "the env step that ended in this row terminated the episode (success)",
    "truncated": "the env step that ended in this row truncated the episode (time limit)",
    FRAMES: "rendered RGB frames, one per camera view (view order: rmtl.views)",
}
"""The `description` attribute of each per-row array."""
EMBEDDING_DESCRIPTION = ("unit image embeddings of each view's frame by model {model_id} (float16; rows below "
                         "rmtl_commit.embeddings[model_id] are committed)")
TEXT_DESCRIPTION = "unit text embeddings of model {model_id}, one row per phrasing (attribute prompts)"
PROMPT_SET_DESCRIPTION = ("unit text embeddings of prompt set {name} ({set_id}) by model {model_id}: one row per "
                          "(role, phrasing), attributes roles and texts")

FRAMES_DTYPE = "uint8"
EMBEDDING_DTYPE = "float16"
TEXT_EMBEDDING_DTYPE = "float32"

FRAME_CHUNK_BYTES = 4 << 20
"""Target uncompressed size of one frames chunk (rows x 1 view x H x W x 3)."""
MAX_FRAME_CHUNK_ROWS = 64


@dataclass(frozen=True)
class Chunking:
    """Rows per chunk for each kind of array (see docs/storage.md for the measurements).

    frame_rows: None picks rows so one (rows, 1 view, H, W, 3) chunk is ~4 MiB, at most 64;
    frames are read in runs (embedding batches, analysis), one view per chunk so a
    single-view reader touches 1/V of the data.
    embedding_rows: small, because the state cache reads random rows (8 rows/chunk read 64
    random rows in ~0.05 s vs ~0.04 s for 1 row/chunk, while writing 7x faster).
    rows: state/key/labels, read whole or in long runs.
    """

    frame_rows: int | None = None
    embedding_rows: int = 8
    rows: int = 4096

    def frame_rows_for(self, height: int, width: int) -> int:
        if self.frame_rows is not None:
            return max(1, int(self.frame_rows))
        return max(1, min(MAX_FRAME_CHUNK_ROWS, FRAME_CHUNK_BYTES // (height * width * 3)))

    def to_dict(self) -> dict:
        return asdict(self)


def model_node_name(model_id: str) -> str:
    """Zarr node name for a model id ('hf-hub:org/name' is not a valid node name).

    Ids that are already safe are kept; others are slugged and suffixed with a short hash
    so two ids never collide. The original id is kept in the array's attributes.
    """
    if not model_id or not isinstance(model_id, str):
        raise ValueError(f"model id must be a non-empty string, got {model_id!r}")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("_.") or "model"
    if slug == model_id:
        return slug
    return f"{slug}-{hashlib.sha1(model_id.encode()).hexdigest()[:8]}"

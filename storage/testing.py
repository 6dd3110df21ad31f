"""Synthetic rows for tests: every value encodes its global row index, so zero rows,
duplicates and misordering are detectable after a crash or resume."""

from __future__ import annotations

import numpy as np

STATE_DIM = 25
"""Width of the synthetic state rows (the pick-and-lift task's; the task's key spec reads them)."""


def synthetic_rows(start: int, n: int, n_views: int = 2, resolution: int = 8, frames: bool = True,
                   episode_len: int = 10) -> dict[str, np.ndarray]:
    """Rows start..start+n-1: state[:, 0] = row + 1 (never 0), frames filled with (row % 250) + 1."""
    rows = np.arange(start, start + n)
    # a function of (row, column) only, so any split into batches gives the same rows
    state = np.sin(rows[:, None] * 0.37 + np.arange(STATE_DIM)[None, :] * 1.3).astype(np.float32)
    state[:, 0] = rows + 1
    batch = {
        "state": state,
        "episode": (rows // episode_len).astype(np.int64),
        "step": (rows % episode_len).astype(np.int32),
        "phase_rule": (rows % 3).astype(np.int8),
        "success": (rows % episode_len) == episode_len - 1,
        "difficulty": np.full(n, 0.5, np.float32),
    }
    if frames:
        f = ((rows % 250) + 1).astype(np.uint8)
        batch["frames"] = np.broadcast_to(f[:, None, None, None, None], (n, n_views, resolution, resolution, 3)).copy()
    return batch


def synthetic_embeddings(start: int, n: int, n_views: int = 2, dim: int = 4) -> np.ndarray:
    """Embeddings whose [:, :, 0] is row + 1 (exact in float16 up to 2048)."""
    rows = np.arange(start, start + n)
    e = np.cos(rows[:, None, None] * 0.11 + np.arange(n_views * dim).reshape(1, n_views, dim)).astype(np.float32)
    e[:, :, 0] = (rows + 1)[:, None]
    return e

"""Training frames streamed from dataset stores through a bounded shuffle buffer.

Training the image tower needs random (row, view) frames from stores that may hold far
more frames than memory does (a 60k-row, six-view store is 10 GB at 96 px). The stream
keeps at most ``cap_bytes`` of frames in memory: contiguous blocks of rows, read whole
(one read per block, not one per sampled row). Batches are drawn from the rows in the
buffer; every ``refresh_every`` batches the oldest block makes way for a block not in the
buffer, so over training every block comes through (the shuffle-buffer pattern of
``tf.data`` and WebDataset). A store smaller than the cap is read once and kept.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np


@dataclass(frozen=True)
class Block:
    """Rows [start, stop) of one store, at global row ids [offset + start, offset + stop)."""

    path: str
    start: int
    stop: int
    offset: int


class FrameStream:
    """Random training frames of chosen rows of several stores, in bounded memory."""

    def __init__(self, paths: Sequence[str], rows_per_store: Sequence[int], train_rows: np.ndarray,
                 cap_bytes: int, row_bytes: int, block_rows: int = 256, refresh_every: int = 4, seed: int = 0):
        if cap_bytes < row_bytes * block_rows:
            block_rows = max(1, cap_bytes // row_bytes)
        if block_rows < 1:
            raise ValueError(f"a frame cap of {cap_bytes} bytes holds no row of {row_bytes} bytes; raise the cap")
        self.cap_bytes, self.row_bytes, self.refresh_every = int(cap_bytes), int(row_bytes), int(refresh_every)
        self.train = np.zeros(int(sum(rows_per_store)), dtype=bool)
        self.train[np.asarray(train_rows, dtype=np.int64)] = True
        blocks, offset = [], 0
        for path, n in zip(paths, rows_per_store):
            for a in range(0, n, block_rows):
                b = min(n, a + block_rows)
                if self.train[offset + a: offset + b].any():
                    blocks.append(Block(str(path), a, b, offset))
            offset += n
        if not blocks:
            raise ValueError("no training rows to stream")
        self.blocks = blocks
        self.max_blocks = max(1, self.cap_bytes // (self.row_bytes * block_rows))
        self.rng = np.random.default_rng(seed)
        self._order = deque(self.rng.permutation(len(blocks)).tolist())
        self.loaded: deque[tuple[int, np.ndarray, np.ndarray]] = deque()  # (block id, global rows, frames)
        self.bytes_read = 0
        self.peak_bytes = 0
        self._batches = 0
        while len(self.loaded) < min(self.max_blocks, len(blocks)):
            self._load_next()

    @property
    def resident_bytes(self) -> int:
        return int(sum(f.nbytes for _, _, f in self.loaded))

    @property
    def streams(self) -> bool:
        """Whether the buffer holds less than every block (False: all frames stay in memory)."""
        return self.max_blocks < len(self.blocks)

    def _load_next(self) -> None:
        from storage.dataset import DatasetStore

        held = {i for i, _, _ in self.loaded}
        while True:
            if not self._order:
                self._order.extend(self.rng.permutation(len(self.blocks)).tolist())
            i = self._order.popleft()
            if i not in held:
                break
        blk = self.blocks[i]
        with DatasetStore.open(blk.path, "r") as store:
            frames = store.read(rows=slice(blk.start, blk.stop), fields=["frames"])["frames"]
        rows = np.arange(blk.offset + blk.start, blk.offset + blk.stop)
        keep = self.train[rows]
        self.loaded.append((i, rows[keep], np.ascontiguousarray(frames[keep])))
        self.bytes_read += frames.nbytes
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes)

    def sample(self, batch_size: int, n_views: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(global rows [B], views [B], frames [B, H, W, 3]) drawn uniformly from the buffer's rows."""
        self._batches += 1
        if self.streams and self._batches % self.refresh_every == 0:
            self.loaded.popleft()  # drop first, so the buffer never exceeds its cap
            self._load_next()
        sizes = np.array([len(r) for _, r, _ in self.loaded])
        pick = rng.integers(int(sizes.sum()), size=batch_size)
        which = np.searchsorted(np.cumsum(sizes), pick, side="right")
        local = pick - np.concatenate([[0], np.cumsum(sizes)[:-1]])[which]
        views = rng.integers(n_views, size=batch_size)
        rows = np.empty(batch_size, dtype=np.int64)
        frames = None
        for j, (_, r, f) in enumerate(self.loaded):
            m = which == j
            if not m.any():
                continue
            if frames is None:
                frames = np.empty((batch_size, *f.shape[2:]), dtype=f.dtype)
            rows[m] = r[local[m]]
            frames[m] = f[local[m], views[m]]
        return rows, views, frames

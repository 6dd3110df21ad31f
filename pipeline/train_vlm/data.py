"""Training data (rendered rows from stores or fresh rollouts) and the frame sources a training
step draws its images from.

Three frame paths, one interface (:class:`FrameSource`): every frame in memory (on the GPU
when it fits), frames streamed from the stores through a bounded buffer, or a locked image
tower's embeddings standing in for the frames (tune='text')."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from collections.abc import Iterator, Sequence

import numpy as np
import torch

HOLDOUT_SALT = 7919


class RowFrames:
    """Frames [N, V, H, W, 3] of which only some rows are in memory.

    Training the text tower against stored image embeddings needs frames only where a
    model must encode them (held-out rows, for the random-weight reference), so the
    other rows' frames are never read: a 60k-state store is 10 GB of frames."""

    def __init__(self, rows: np.ndarray, frames: np.ndarray, n_rows: int):
        self.rows = np.asarray(rows, dtype=np.int64)  # sorted global row ids held
        self.frames = frames
        self.shape = (n_rows, *frames.shape[1:])

    @classmethod
    def dense(cls, frames: np.ndarray) -> RowFrames:
        return cls(np.arange(len(frames)), frames, len(frames))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if len(self.rows) == 0:
            pos, missing = rows, rows
        else:
            pos = np.minimum(np.searchsorted(self.rows, rows), len(self.rows) - 1)
            missing = rows[self.rows[pos] != rows]
        if len(missing):
            raise ValueError(f"frames of rows {missing[:5].tolist()} were not loaded (only held-out rows "
                             f"are read when stored image embeddings stand in for the frames)")
        return self.frames[pos]

    @classmethod
    def concat(cls, parts: list) -> RowFrames | np.ndarray:
        if all(isinstance(p, np.ndarray) for p in parts):
            return np.concatenate(parts)
        parts = [p if isinstance(p, RowFrames) else cls.dense(p) for p in parts]
        offsets = np.cumsum([0] + [len(p) for p in parts])
        rows = np.concatenate([p.rows + o for p, o in zip(parts, offsets)])
        return cls(rows, np.concatenate([p.frames for p in parts]), int(offsets[-1]))


@dataclass
class TrainingData:
    """Rendered rows: frames [N, V, H, W, 3], states [N, 25], episode/step [N], expert [N]."""

    frames: np.ndarray | RowFrames
    states: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    expert: np.ndarray
    views: Sequence[str]
    image_embeddings: np.ndarray | None = None
    """Stored image embeddings [N, V, D] of the ``init`` model, when every store has them."""
    sources: list[tuple[str, int]] | None = None
    """(store path, rows) in row order, when the frames stay in the stores and training
    streams them (:class:`pipeline.stores.frame_stream.FrameStream`); None: ``frames`` holds them all."""

    def __len__(self) -> int:
        return len(self.states)

    @classmethod
    def concat(cls, parts: list[TrainingData]) -> TrainingData:
        if not parts:
            raise ValueError("no training data")
        cat = lambda name: np.concatenate([getattr(p, name) for p in parts])  # noqa: E731
        have = all(p.image_embeddings is not None for p in parts)
        sources = [s for p in parts for s in p.sources] if all(p.sources is not None for p in parts) else None
        return cls(RowFrames.concat([p.frames for p in parts]), cat("states"), cat("episode"), cat("step"),
                   cat("expert"), parts[0].views, cat("image_embeddings") if have else None, sources)

    @classmethod
    def from_batches(cls, batches: list[dict], views: Sequence[str], expert: bool, episode_offset: int = 0) -> TrainingData:
        cat = lambda k: np.concatenate([b[k] for b in batches])  # noqa: E731
        n = sum(len(b["state"]) for b in batches)
        return cls(cat("frames"), cat("state"), cat("episode") + episode_offset, cat("step"),
                   np.full(n, expert), list(views))

    @classmethod
    def from_stores(cls, paths: Sequence[str | Path], embeddings_of: str | None = None,
                    image_tower: str | None = None, holdout_fraction: float | None = None,
                    stream: bool = False) -> TrainingData:
        """Rows of one or more dataset stores; episode ids are made unique across stores.
        ``embeddings_of``: a model spec whose stored image embeddings to load too (when a
        store has them for every row); ``image_tower``: its ``VLM.image_tower_id``, so that
        embeddings stored by another model with the same image tower serve as well.
        ``holdout_fraction``: where a store's embeddings were loaded, read the frames of
        the held-out rows only (:meth:`holdout_mask`); None reads every frame. ``stream``:
        read only the held-out rows' frames (with ``holdout_fraction``) and leave the rest in
        the stores, for training to stream in bounded memory."""
        from pipeline.jobs.embed import same_image_tower
        from rmtl.vlm.spec import parse_spec
        from storage.dataset import DatasetStore

        model_id = parse_spec(embeddings_of).model_id if embeddings_of else None
        parts, offset = [], 0
        for path in paths:
            with DatasetStore.open(path, "r") as store:
                d = store.read(fields=["state", "episode", "step"])
                policy = store.info.get("provenance", {}).get("policy", "expert")
                n = len(d["state"])
                emb, source = None, model_id
                if image_tower and source is not None and store.embedded_rows(source) < n:
                    source = same_image_tower(store, model_id, image_tower) or model_id
                if source is not None and store.embedded_rows(source) == n:
                    emb = np.asarray(store.embeddings(source, slice(0, n)), dtype=np.float32)
                if (emb is not None or stream) and holdout_fraction is not None:
                    rows = np.flatnonzero(_held_out(d["episode"] + offset, holdout_fraction))
                    frames = RowFrames(rows, store.read(rows=rows, fields=["frames"])["frames"], n)
                else:
                    frames = store.read(fields=["frames"])["frames"]
                parts.append(cls(frames, d["state"], d["episode"] + offset, d["step"],
                                 np.full(n, policy == "expert"), store.views, emb,
                                 [(str(path), n)] if stream else None))
                offset = int(parts[-1].episode.max()) + 1 if len(d["state"]) else offset
        return cls.concat(parts)

    def holdout_mask(self, fraction: float) -> np.ndarray:
        """Rows of held-out episodes (a deterministic hash of the episode id)."""
        return _held_out(self.episode, fraction)


def _held_out(episode: np.ndarray, fraction: float) -> np.ndarray:
    h = (np.asarray(episode).astype(np.int64) * HOLDOUT_SALT) % 1000
    return h < int(round(fraction * 1000))


def encode_rows(vlm, data: TrainingData, rows: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Image embeddings [len(rows), V, D] of every view of the given rows."""
    frames = data.frames[rows]
    n, v = frames.shape[:2]
    return vlm.encode_images(frames.reshape(n * v, *frames.shape[2:]), batch_size=batch_size).reshape(n, v, -1)


Batch = tuple[np.ndarray, torch.Tensor]
"""(row ids [B], inputs): the rows a batch samples (one random view each) and what
:meth:`FrameSource.embed` turns into their image embeddings."""


class FrameSource(Protocol):
    """Where training images come from; the loop sees only rows and unit image embeddings."""

    def batches(self, size: int, rng: np.random.Generator) -> Iterator[Batch]:
        """Endless training batches of ``size`` (row, view) samples, drawn with ``rng``."""

    def embed(self, model, inputs: torch.Tensor) -> torch.Tensor:
        """Unit image embeddings [B, D] of a batch's inputs (run under the training autocast)."""

    def stored_embeddings(self, rows: np.ndarray) -> np.ndarray | None:
        """Image embeddings [len(rows), V, D] the trained model has for these rows without
        encoding them (a locked image tower's); None: evaluation encodes the frames."""

    def report(self) -> dict | None:
        """What metrics.json records about the source (None: nothing)."""


class _PixelSource:
    """Frames the image tower encodes each step: preprocessed, then randomly shifted."""

    def __init__(self, vlm, shift: int):
        self.device, self.preprocess_cfg, self.shift = vlm.device, vlm.preprocess_cfg, shift

    def pixels(self, images: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        from rmtl.vlm.model import preprocess_batch

        pixels = preprocess_batch(images.to(self.device, non_blocking=True), self.preprocess_cfg)
        if self.shift:
            p = self.shift
            padded = torch.nn.functional.pad(pixels, (p, p, p, p), mode="replicate")
            dx, dy = rng.integers(0, 2 * p + 1, size=2)
            pixels = padded[..., dy : dy + pixels.shape[-2], dx : dx + pixels.shape[-1]]
        return pixels

    def embed(self, model, inputs: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(model.encode_image(inputs), dim=-1)

    def stored_embeddings(self, rows: np.ndarray) -> None:
        return None

    def report(self) -> dict | None:
        return None


class InMemoryFrames(_PixelSource):
    """Every training frame in memory; on the GPU when the frames fit easily."""

    def __init__(self, vlm, frames: np.ndarray, train_rows: np.ndarray, shift: int):
        super().__init__(vlm, shift)
        self.train_rows, self.n_views = train_rows, frames.shape[1]
        self.frames = torch.from_numpy(frames)
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            # uint8 frames on the GPU when they fit easily: batch gathers then cost nothing.
            self.frames = self.frames.to(self.device) if frames.nbytes < 0.4 * free else self.frames.pin_memory()

    def batches(self, size: int, rng: np.random.Generator) -> Iterator[Batch]:
        on = self.frames.device
        while True:
            rows = rng.choice(self.train_rows, size=size)
            views = rng.integers(self.n_views, size=size)
            images = self.frames[torch.from_numpy(rows).to(on), torch.from_numpy(views).to(on)]
            yield rows, self.pixels(images, rng)


class StreamedFrames(_PixelSource):
    """Training frames read from the stores through a bounded shuffle buffer of row blocks
    (:class:`pipeline.stores.frame_stream.FrameStream`)."""

    def __init__(self, vlm, data: TrainingData, train_rows: np.ndarray, cap_gb: float, seed: int, shift: int):
        from pipeline.stores.frame_stream import FrameStream

        super().__init__(vlm, shift)
        self.n_views = data.frames.shape[1]
        row_bytes = int(np.prod(data.frames.shape[1:]))
        self.stream = FrameStream([p for p, _ in data.sources], [n for _, n in data.sources], train_rows,
                                  cap_bytes=int(cap_gb * 2**30), row_bytes=row_bytes, seed=seed)
        print(f"streaming training frames: {len(self.stream.blocks)} blocks, at most {self.stream.max_blocks} "
              f"in memory ({cap_gb:g} GiB cap)")

    def batches(self, size: int, rng: np.random.Generator) -> Iterator[Batch]:
        while True:
            rows, _, frames = self.stream.sample(size, self.n_views, rng)
            yield rows, self.pixels(torch.from_numpy(frames), rng)

    def report(self) -> dict:
        s = self.stream
        return {"frame_stream": {"cap_bytes": s.cap_bytes, "peak_bytes": s.peak_bytes, "bytes_read": s.bytes_read,
                                 "blocks": len(s.blocks), "blocks_in_memory": s.max_blocks}}


class LockedImageTower:
    """The locked image tower's embeddings of every row [N, V, D] stand in for the frames: none
    go to the device, and the image tower never runs during training."""

    def __init__(self, embeddings: np.ndarray, train_rows: np.ndarray, n_views: int, device):
        self.embeddings, self.train_rows, self.n_views, self.device = embeddings, train_rows, n_views, device
        self.on_device = torch.from_numpy(np.ascontiguousarray(embeddings, dtype=np.float32)).to(device)

    @classmethod
    def of(cls, vlm, data: TrainingData, train_rows: np.ndarray, init: str | None) -> LockedImageTower:
        """The stores' embeddings of ``init`` where every store has them, else encoded once here."""
        n_views = data.frames.shape[1]
        if data.image_embeddings is not None:
            print(f"image tower locked: using the stores' embeddings of {init} ({data.image_embeddings.shape[0]} rows)")
            return cls(data.image_embeddings, train_rows, n_views, vlm.device)
        if isinstance(data.frames, RowFrames):
            raise ValueError("some stores hold no image embeddings of the init model, and only their held-out "
                             f"frames were read: embed them first (rmtl embed STORE --model {init})")
        print(f"image tower locked: encoding {len(data)} rows x {n_views} views once")
        return cls(encode_rows(vlm, data, np.arange(len(data))), train_rows, n_views, vlm.device)

    def batches(self, size: int, rng: np.random.Generator) -> Iterator[Batch]:
        while True:
            rows = rng.choice(self.train_rows, size=size)
            views = rng.integers(self.n_views, size=size)
            yield rows, self.on_device[torch.from_numpy(rows).to(self.device), torch.from_numpy(views).to(self.device)]

    def embed(self, model, inputs: torch.Tensor) -> torch.Tensor:
        return inputs

    def stored_embeddings(self, rows: np.ndarray) -> np.ndarray:
        return self.embeddings[rows]

    def report(self) -> None:
        return None


def frame_source(vlm, data: TrainingData, train_rows: np.ndarray, cfg) -> FrameSource:
    """The frame path of a run: a locked image tower's embeddings (tune='text'), frames streamed
    from the stores (``data.sources``), or every frame in memory."""
    if cfg.tune == "text":
        return LockedImageTower.of(vlm, data, train_rows, cfg.init)
    if data.sources is not None:
        return StreamedFrames(vlm, data, train_rows, cfg.frame_cache_gb, cfg.seed, cfg.shift_augment)
    if isinstance(data.frames, RowFrames):
        raise ValueError("tune='all' trains the image tower on every frame, but only held-out frames were read")
    return InMemoryFrames(vlm, data.frames, train_rows, cfg.shift_augment)

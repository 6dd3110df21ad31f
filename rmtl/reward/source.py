"""The boundary "batch of states -> per-view embeddings" used by the reward wrapper.

An :class:`EmbeddingSource` gets the states of N envs and a lazy renderer for them. The
default renders everything and embeds it with a VLM; a cache-backed source (the FAISS
state cache) looks states up first and renders only its misses, and a remote reward
service can implement the same call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable
from collections.abc import Callable

import numpy as np

if TYPE_CHECKING:  # annotations only: the model module imports open_clip and torch
    from rmtl.vlm.model import VLM


FrameRenderer = Callable[[np.ndarray], np.ndarray]
"""Env row indices [n] -> uint8 frames [n, V, H, W, 3] of those envs' current states."""


@runtime_checkable
class EmbeddingSource(Protocol):
    """States [N, 25] (+ a renderer for them) -> unit image embeddings float32 [N, V, D].

    The view axis follows the caller's views (the order ``render`` returns them in).
    """

    def __call__(self, states: np.ndarray, render: FrameRenderer) -> np.ndarray: ...


class VLMEmbeddingSource:
    """Renders every state and embeds all N x V frames in batches of ``batch_size``."""

    def __init__(self, vlm: VLM, batch_size: int = 64):
        self.vlm = vlm
        self.batch_size = int(batch_size)

    @property
    def image_size(self) -> int:
        return self.vlm.image_size

    def embed_frames(self, frames: np.ndarray) -> np.ndarray:
        """uint8 frames [N, V, H, W, 3] -> float32 [N, V, D] in ceil(N*V / batch_size) model calls."""
        n, v = frames.shape[:2]
        flat = frames.reshape(n * v, *frames.shape[2:])
        return self.vlm.encode_images(flat, batch_size=self.batch_size).reshape(n, v, -1)

    def __call__(self, states: np.ndarray, render: FrameRenderer) -> np.ndarray:
        return self.embed_frames(render(np.arange(len(states))))

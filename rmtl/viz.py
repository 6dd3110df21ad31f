"""Small image helpers for things people look at (montages of camera views)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw


def montage(frames: np.ndarray, labels: Sequence[str], columns: int = 3, label_height: int = 18) -> Image.Image:
    """Grid of uint8 frames [V, H, W, 3], each with its label written above it."""
    v, h, w, _ = frames.shape
    if len(labels) != v:
        raise ValueError(f"{v} frames but {len(labels)} labels")
    columns = max(1, min(columns, v))
    rows = (v + columns - 1) // columns
    canvas = Image.new("RGB", (columns * w, rows * (h + label_height)), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for i, (frame, label) in enumerate(zip(frames, labels)):
        x, y = (i % columns) * w, (i // columns) * (h + label_height)
        draw.text((x + 4, y + 3), label, fill=(0, 0, 0))
        canvas.paste(Image.fromarray(frame), (x, y + label_height))
    return canvas

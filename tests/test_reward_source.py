"""The render-and-embed EmbeddingSource (rmtl.reward.source)."""

from __future__ import annotations

import numpy as np

from rmtl.reward.source import EmbeddingSource, VLMEmbeddingSource
from rmtl.vlm.testing import tiny_vlm


def test_embeds_all_views_in_few_model_calls(monkeypatch):
    vlm = tiny_vlm(seed=0)
    calls = []
    original = vlm.forward_images
    monkeypatch.setattr(vlm, "forward_images", lambda x: calls.append(len(x)) or original(x))
    src = VLMEmbeddingSource(vlm, batch_size=4)
    assert isinstance(src, EmbeddingSource)
    frames = np.random.default_rng(0).integers(0, 256, (3, 2, 64, 64, 3), dtype=np.uint8)
    asked = []
    emb = src(np.zeros((3, 25), np.float32), lambda idx: asked.append(list(idx)) or frames[idx])
    assert asked == [[0, 1, 2]]
    assert calls == [4, 2]  # 6 images in batches of 4
    assert emb.shape == (3, 2, vlm.embed_dim) and emb.dtype == np.float32
    np.testing.assert_allclose(emb[1, 1], vlm.encode_images(frames[1, 1:2])[0], atol=1e-5)

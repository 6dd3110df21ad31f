"""Batched encoders and the tensor preprocessing fast path (rmtl.vlm.model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from rmtl.errors import ConfigError
from rmtl.vlm.model import preprocess_batch
from rmtl.vlm.testing import tiny_vlm


@pytest.fixture(scope="module")
def vlm():
    return tiny_vlm(seed=0)


@pytest.fixture(scope="module")
def frames():
    # Smooth images (like renders), so resampling differences between PIL and torch stay small.
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (4, 12, 12, 3)).astype(np.uint8)
    return np.stack([np.asarray(Image.fromarray(b).resize((96, 96), Image.BILINEAR)) for b in base])


def test_unit_norm_float32_and_batching(vlm, frames):
    a = vlm.encode_images(frames)
    b = vlm.encode_images(frames, batch_size=3)
    assert a.dtype == np.float32 and a.shape == (4, vlm.embed_dim)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_fast_path_matches_model_preprocess(vlm, frames):
    """uint8 frames preprocessed on tensors ~= the model's own PIL transform."""
    ref = torch.stack([vlm.preprocess(Image.fromarray(f)) for f in frames])
    fast = vlm.preprocess_frames(frames)
    assert fast.shape == ref.shape == (4, 3, 64, 64)
    assert (fast - ref).abs().mean() < 0.02  # PIL rounds to uint8 between resize and normalise
    cos = (vlm.encode_images(frames) * vlm.encode_images(ref)).sum(1)
    assert cos.min() > 0.999


def test_preprocess_follows_config_not_clip_constants():
    x = torch.full((1, 8, 8, 3), 255, dtype=torch.uint8)
    out = preprocess_batch(x, {"size": 8, "mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25), "resize_mode": "squash"})
    assert torch.allclose(out, torch.full_like(out, 2.0))
    wide = torch.zeros((1, 8, 16, 3), dtype=torch.uint8)
    for mode, fill in (("shortest", 0.0), ("longest", 1.0), ("squash", 0.0)):
        cfg = {"size": 8, "mean": (0, 0, 0), "std": (1, 1, 1), "resize_mode": mode, "fill_color": 255, "interpolation": "bilinear"}
        out = preprocess_batch(wide, cfg)
        assert out.shape == (1, 3, 8, 8)
        assert out[0, :, 0, 0].max().item() == pytest.approx(fill)  # 'longest' pads with the fill colour


def test_text_uses_model_tokenizer(vlm):
    tokens = vlm.tokenizer(["a robot gripper"])
    assert tokens.shape[-1] == 24  # the model's context length, not 77
    t = vlm.encode_text(["a robot gripper", "a red cube"])
    assert t.shape == (2, vlm.embed_dim)
    np.testing.assert_allclose(np.linalg.norm(t, axis=1), 1.0, atol=1e-5)


def test_bad_inputs(vlm):
    with pytest.raises(ConfigError, match="uint8"):
        vlm.encode_images(np.zeros((2, 64, 64), dtype=np.uint8))
    with pytest.raises(ConfigError):
        vlm.encode_images(np.zeros((2, 64, 64, 3), dtype=np.float32))
    with pytest.raises(ConfigError, match="list of strings"):
        vlm.encode_text("a red cube")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_defaults_to_bf16_autocast_and_matches_cpu(frames):
    cpu = tiny_vlm(seed=3, device="cpu")
    gpu = tiny_vlm(seed=3, device=None)
    assert gpu.device.type == "cuda" and gpu.precision == "amp_bf16"
    a, b = cpu.encode_images(frames), gpu.encode_images(frames)
    assert b.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-4)
    assert (a * b).sum(1).min() > 0.99  # bf16 compute, same model
    assert (cpu.encode_text(["a red cube"]) * gpu.encode_text(["a red cube"])).sum() > 0.99


def test_image_tower_id_changes_with_the_image_tower_only(tmp_path):
    from pipeline.train_vlm import save_model
    from rmtl.vlm import load_vlm

    shipped = load_vlm("rmtl-fetch-tiny", device="cpu")
    assert load_vlm("rmtl-fetch-tiny", device="cpu").image_tower_id == shipped.image_tower_id
    with torch.no_grad():
        shipped.model.token_embedding.weight.add_(0.01)  # a text-tower change
    save_model(shipped, "rmtl-fetch-tiny", tmp_path)
    retexted = load_vlm(str(tmp_path), device="cpu")  # saved as float16, reloaded: same tower, new model id
    assert retexted.model_id != shipped.model_id and retexted.image_tower_id == shipped.image_tower_id
    with torch.no_grad():
        next(retexted.model.visual.parameters()).add_(0.01)
    del retexted.__dict__["image_tower_id"]  # cached per instance
    assert retexted.image_tower_id != shipped.image_tower_id

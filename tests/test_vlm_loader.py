"""Loading VLMs by spec, and the one-line failures when weights are missing (rmtl.vlm.loader)."""

from __future__ import annotations

import json
import time

import numpy as np
import open_clip
import pytest
import torch
from safetensors.torch import save_file

from rmtl.errors import ModelLoadError
from rmtl.vlm import load_vlm, register_model, select_device, select_precision
from rmtl.vlm.testing import TINY_CONFIG, TINY_NAME, register_tiny, tiny_vlm


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No network, an empty Hugging Face cache, and a tripwire on model construction."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))

    def no_build(*args, **kwargs):
        raise AssertionError("a model was built before its weights were found")

    monkeypatch.setattr(open_clip, "create_model_and_transforms", no_build)
    return tmp_path


def _one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_paper_model_offline_fails_fast(offline):
    t = time.perf_counter()
    with pytest.raises(ModelLoadError) as e:
        load_vlm("PE-Core-bigG-14-448:meta")
    assert time.perf_counter() - t < 2.0
    msg = _one_line(e)
    assert "'PE-Core-bigG-14-448:meta'" in msg
    assert "Hugging Face cache" in msg and str(offline / "hf") in msg
    assert "timm/PE-Core-bigG-14-448" in msg
    assert "HF_HUB_OFFLINE" in msg and "local directory" in msg


def test_hf_hub_offline_fails_fast(offline):
    with pytest.raises(ModelLoadError) as e:
        load_vlm("hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K")
    msg = _one_line(e)
    assert "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K" in msg
    assert "open_clip_config.json" in msg and "Hugging Face cache" in msg and "local directory" in msg


def test_unknown_name(offline):
    with pytest.raises(ModelLoadError) as e:
        load_vlm("ViT-B-3")
    msg = _one_line(e)
    assert "unknown model 'ViT-B-3'" in msg and "ViT-B-32" in msg  # suggests close names


def test_unknown_tag(offline):
    with pytest.raises(ModelLoadError) as e:
        load_vlm("ViT-B-32:nope")
    assert "unknown pretrained tag 'nope'" in _one_line(e)


def test_missing_local_paths(offline):
    with pytest.raises(ModelLoadError) as e:
        load_vlm(str(offline / "no_such_dir"))
    assert "does not exist" in _one_line(e) and "no_such_dir" in str(e.value)
    with pytest.raises(ModelLoadError) as e:
        load_vlm(f"ViT-B-32:{offline / 'missing.safetensors'}")
    assert "weights file" in _one_line(e) and "does not exist" in str(e.value)
    empty = offline / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError) as e:
        load_vlm(str(empty))
    assert "has no open_clip_config.json" in _one_line(e)
    (empty / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_CONFIG}))
    with pytest.raises(ModelLoadError) as e:
        load_vlm(str(empty))
    assert "no weights" in _one_line(e)


def test_architecture_without_weights_needs_explicit_random(offline):
    with pytest.raises(ModelLoadError) as e:
        load_vlm("ViT-B-32")
    assert "ViT-B-32@random" in _one_line(e)
    register_model("test-no-weights", TINY_CONFIG)
    with pytest.raises(ModelLoadError) as e:
        load_vlm("test-no-weights")
    assert "no weights registered" in _one_line(e) and "test-no-weights@random" in str(e.value)


def test_shipped_default_model_loads_its_weights():
    vlm = load_vlm("rmtl-fetch-tiny")
    assert vlm.model_id.startswith("rmtl-fetch-tiny__") and vlm.image_size == 96 and vlm.embed_dim == 128
    random = load_vlm("rmtl-fetch-tiny@random")
    frames = np.zeros((1, 96, 96, 3), np.uint8)
    assert not np.allclose(vlm.encode_images(frames), random.encode_images(frames))


def test_input_side_is_read_from_the_config_and_matches_the_built_model():
    from rmtl.vlm import get_registered, input_side, list_registered

    specs = [f"{register_tiny()}@random", *(n for n in list_registered() if get_registered(n).weights is not None)]
    assert "rmtl-fetch-tiny" in specs
    for spec in specs:
        assert input_side(spec) == load_vlm(spec, device="cpu").image_size, spec
    register_model("test-input-side-no-weights", TINY_CONFIG)
    with pytest.raises(ModelLoadError, match="no weights registered"):
        input_side("test-input-side-no-weights")  # resolved like load_vlm: the same one-line error


def test_device_and_precision_choice():
    dev = select_device()
    assert dev.type == ("cuda" if torch.cuda.is_available() else "cpu")
    from rmtl.vlm.device import cpu_has_bf16

    assert select_precision(torch.device("cpu")) == ("bf16" if cpu_has_bf16() else "fp32")
    assert select_precision(torch.device("cuda")) == "amp_bf16"
    with pytest.raises(ModelLoadError, match="not supported"):
        select_precision(torch.device("cpu"), "int3")


def test_random_load_and_spec_attributes():
    vlm = tiny_vlm(seed=0)
    assert vlm.model_id == f"{TINY_NAME}__random"
    assert vlm.embed_dim == TINY_CONFIG["embed_dim"] and vlm.image_size == 64
    assert vlm.device.type == "cpu" and vlm.precision == select_precision(torch.device("cpu"))


def test_local_dir_and_local_file_round_trip(tmp_path):
    vlm = tiny_vlm(seed=1)
    d = tmp_path / "fetch_clip"
    d.mkdir()
    save_file({k: v.contiguous() for k, v in vlm.model.state_dict().items()}, d / "open_clip_model.safetensors")
    pp = {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bilinear", "resize_mode": "squash"}
    (d / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_CONFIG, "preprocess_cfg": pp}))
    frames = np.random.default_rng(0).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)

    local = load_vlm(str(d), device="cpu")
    assert local.model_id.startswith("fetch_clip__local__")
    assert tuple(local.preprocess_cfg["mean"]) == (0.5, 0.5, 0.5)  # the directory's preprocessing, not CLIP's
    np.testing.assert_allclose(local.encode_text(["a red cube"]), vlm.encode_text(["a red cube"]), atol=1e-5)

    by_file = load_vlm(f"{TINY_NAME}:{d / 'open_clip_model.safetensors'}", device="cpu")
    assert by_file.model_id == f"{TINY_NAME}__open_clip_model__" + local.model_id.rsplit("__", 1)[1]
    np.testing.assert_allclose(by_file.encode_images(frames), vlm.encode_images(frames), atol=1e-5)


def test_hf_hub_from_cache_offline(monkeypatch, tmp_path):
    """A hub id whose files are in the HF cache loads with HF_HUB_OFFLINE=1 and no network."""
    vlm = tiny_vlm(seed=2)
    cache = tmp_path / "hf"
    snap = cache / "models--rmtl--tiny-clip" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (cache / "models--rmtl--tiny-clip" / "refs").mkdir()
    (cache / "models--rmtl--tiny-clip" / "refs" / "main").write_text("0" * 40)
    save_file({k: v.contiguous() for k, v in vlm.model.state_dict().items()}, snap / "open_clip_model.safetensors")
    (snap / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_CONFIG, "preprocess_cfg": {}}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    got = load_vlm("hf-hub:rmtl/tiny-clip", device="cpu", cache_dir=cache)
    assert got.model_id == "hf-hub__rmtl__tiny-clip"
    np.testing.assert_allclose(got.encode_text(["a red cube"]), vlm.encode_text(["a red cube"]), atol=1e-5)


def test_tag_resolves_to_cached_file_with_the_tags_preprocessing(monkeypatch, tmp_path):
    """PE-Core's tag finds its checkpoint in the HF cache and carries PE's own mean/std (no build)."""
    from rmtl.vlm import resolve

    cache = tmp_path / "hf"
    repo = cache / "models--timm--PE-Core-bigG-14-448"
    snap = repo / "snapshots" / ("1" * 40)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("1" * 40)
    (snap / "open_clip_model.safetensors").write_bytes(b"stub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec, plan = resolve("PE-Core-bigG-14-448:meta", cache_dir=cache)
    assert plan.pretrained == str(snap / "open_clip_model.safetensors")
    assert plan.preprocess["image_mean"] == (0.5, 0.5, 0.5) and plan.preprocess["image_resize_mode"] == "squash"
    assert spec.model_id == "PE-Core-bigG-14-448__meta"


def test_random_weights_are_the_same_model_in_every_load():
    frames = np.full((1, 96, 96, 3), 120, np.uint8)
    a = load_vlm("rmtl-fetch-tiny@random").encode_images(frames)
    torch.manual_seed(123)  # the global RNG state must not matter
    b = load_vlm("rmtl-fetch-tiny@random").encode_images(frames)
    assert np.array_equal(a, b)


def test_bf16_is_chosen_only_for_cpus_with_bf16_instructions(tmp_path, monkeypatch):
    """An AVX-512 CPU without AVX512-BF16 emulates bf16 in oneDNN (slower than fp32): fp32 there."""
    from rmtl.vlm import device

    def cpuinfo(flags: str):
        f = tmp_path / "cpuinfo"
        f.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 avx2 {flags}\n\nprocessor\t: 1\nflags\t\t: fpu\n")
        real = device.cpu_flags
        monkeypatch.setattr(device, "cpu_flags", lambda path=str(f): real(path))

    cpuinfo("avx512f avx512bw avx512vl avx512dq")  # Skylake/Cascade/Ice Lake: no bf16 instructions
    assert not device.cpu_has_bf16()
    assert select_precision(torch.device("cpu")) == "fp32"
    cpuinfo("avx512f avx512_bf16")  # Cooper Lake, AMD Zen 4/5
    assert device.cpu_has_bf16()
    cpuinfo("avx512f amx_bf16 amx_tile")  # Sapphire Rapids
    assert device.cpu_has_bf16()
    assert device.cpu_flags(str(tmp_path / "absent")) is None

"""Project model registry (rmtl.vlm.registry)."""

from __future__ import annotations

import json

import open_clip
import pytest

from rmtl.errors import ConfigError
from rmtl.vlm import registry
from rmtl.vlm.testing import TINY_CONFIG


def test_shipped_config_is_an_openclip_name():
    assert "rmtl-fetch-tiny" in registry.list_registered()
    assert "rmtl-fetch-tiny" in registry.open_clip_with_project_models().list_models()
    assert registry.architecture_config("rmtl-fetch-tiny")["vision_cfg"]["image_size"] == 96


def test_register_dict_and_file(tmp_path):
    entry = registry.register_model("reg-test-a", TINY_CONFIG, overwrite=True)
    assert entry.weights is None
    assert open_clip.get_model_config("reg-test-a")["embed_dim"] == TINY_CONFIG["embed_dim"]
    p = tmp_path / "arch.json"
    p.write_text(json.dumps(TINY_CONFIG))
    w = tmp_path / "w.safetensors"
    w.write_bytes(b"")
    entry = registry.register_model("reg-test-b", p, weights=w, preprocess={"mean": (0.5, 0.5, 0.5)}, overwrite=True)
    assert registry.get_registered("reg-test-b").weights == w


def test_register_errors(tmp_path):
    with pytest.raises(ConfigError, match="already registered"):
        registry.register_model("ViT-B-32", TINY_CONFIG)
    with pytest.raises(ConfigError, match="not allowed"):
        registry.register_model("bad:name", TINY_CONFIG)
    with pytest.raises(ConfigError, match="lacks"):
        registry.register_model("reg-test-c", {"embed_dim": 8}, overwrite=True)
    with pytest.raises(ConfigError, match="does not exist"):
        registry.register_model("reg-test-d", TINY_CONFIG, weights=tmp_path / "missing.pt", overwrite=True)


def test_unknown_name_is_none():
    assert registry.get_registered("ViT-B-32") is None
    assert registry.architecture_config("no-such-arch") is None


def test_checking_a_spec_loads_neither_open_clip_nor_torch():
    """Configs name models; validating one (every command's options) must not cost a torch import."""
    import subprocess
    import sys

    code = ("import sys; from rmtl.train.config import Stage1Config; Stage1Config(); "
            "print(sorted(m for m in ('torch', 'open_clip', 'mujoco') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

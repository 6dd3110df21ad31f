"""The compiled image tower (``reward.compile``): same embeddings, same ids, one clear line when it cannot compile."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

from rmtl.errors import ModelLoadError
from rmtl.vlm import load_vlm

HAS_COMPILER = any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "clang++"))


def _frames(n: int, size: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


@pytest.mark.skipif(not HAS_COMPILER, reason="torch.compile (inductor) needs a C++ compiler on CPU")
@pytest.mark.slow
def test_compiled_fast_model_embeds_as_the_eager_one():
    eager = load_vlm("rmtl-fetch-fast")
    compiled = load_vlm("rmtl-fetch-fast", compile=True)
    assert compiled.compiled and not eager.compiled and "compiled" in repr(compiled)
    assert compiled.model_id == eager.model_id and compiled.image_tower_id == eager.image_tower_id
    for n in (12, 5):  # a second batch size recompiles, and still agrees
        frames = _frames(n, eager.image_size)
        a, b = eager.encode_images(frames), compiled.encode_images(frames)
        assert b.shape == a.shape == (n, eager.embed_dim)
        np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
        # the same bf16/fp32 arithmetic in another order: agreement to the precision's rounding
        assert float(np.abs(a - b).max()) < 0.01
        assert float((a * b).sum(axis=1).min()) > 0.999


def test_a_tower_that_cannot_compile_fails_at_load_with_one_line(monkeypatch):
    def broken(module, **kwargs):
        def call(*args, **kw):
            raise RuntimeError("InductorError: CppCompileError: C++ compile error\n  a long compiler log\n  more")
        return call

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.raises(ModelLoadError) as err:
        load_vlm("rmtl-fetch-fast", compile=True)
    msg = str(err.value)
    assert "\n" not in msg and "rmtl-fetch-fast" in msg and "reward.compile=false" in msg and "C++ compiler" in msg


def test_stage1_compiles_an_injected_model_when_its_config_says_so(monkeypatch, tmp_path):
    from rmtl.train import stage1_config
    from rmtl.tasks import get_task
    from rmtl.train.envs.train_env import build_train_env
    from rmtl.vlm.testing import tiny_vlm

    calls = []

    def fake_compile(module, **kwargs):  # the plumbing, not inductor: record and run eagerly
        calls.append(module)
        return module

    monkeypatch.setattr(torch, "compile", fake_compile)
    vlm = tiny_vlm()
    cfg = stage1_config("rmtl", n_envs=2, vec_env="dummy", output_dir=str(tmp_path),
                        reward={"model": "rmtl-test-tiny@random", "compile": True})
    env = build_train_env(cfg.env_stack(), get_task(), vlm=vlm)
    try:
        assert vlm.compiled and calls == [vlm.model.visual]
    finally:
        env.venv.close()

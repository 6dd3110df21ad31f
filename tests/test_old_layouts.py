"""Stores and runs written before the layering change still load: a store whose key spec has
no id (tests/fixtures/before_layers/store.zarr) and a Stage-1 run directory of that time
(stage1_run), both made by commit 096a6bb's code (fixtures/before_layers/make.py)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rmtl.tasks.fetch_lift.state import KEY_SPEC, state_key

FIXTURES = Path(__file__).parent / "fixtures" / "before_layers"
MODEL = "rmtl-fetch-tiny__51e76d00"


@pytest.fixture
def old(tmp_path):
    shutil.copytree(FIXTURES, tmp_path / "old")
    return tmp_path / "old"


def test_old_store_reads_caches_and_appends(old):
    from pipeline.store_rows import load_rows
    from pipeline.stored_text import stored_text_embeddings
    from rmtl.reward.prompts import PromptConfig
    from storage.cache import StateCache
    from storage.dataset import DatasetStore

    path = old / "store.zarr"
    with DatasetStore.open(path) as st:
        assert "id" not in st.info["key_spec"] and KEY_SPEC.matches(st.info["key_spec"])
        states, frames = (st.read(fields=["state", "frames"])[k] for k in ("state", "frames"))
        rows = load_rows(st, MODEL)
        assert len(rows) == len(st) and rows.phase.max() <= 2
        text = stored_text_embeddings(st, MODEL, PromptConfig())
        assert text.goals.shape[0] == 3
        cache = StateCache.open(st, MODEL, persist=False)
        hit = cache.lookup(cache.state_keys(states[5:8], KEY_SPEC), radius=1e-6)
        assert hit.hit.all() and hit.rows.tolist() == [5, 6, 7]
    with DatasetStore.open(path, "a", key_spec=KEY_SPEC) as st:  # keys left to the store: the old layout's
        n = len(st)
        st.append({"state": states[:2], "episode": np.full(2, 9), "step": np.arange(2), "phase_rule": np.zeros(2, np.int8),
                   "success": np.zeros(2, bool), "difficulty": np.ones(2, np.float32), "frames": frames[:2]})
        assert np.array_equal(st.read(slice(n, n + 2), ["key"])["key"], state_key(states[:2]))


def test_a_key_spec_of_another_version_is_refused(old):
    from dataclasses import replace

    from storage.cache import StateCache
    from storage.dataset import DatasetStore
    from storage.errors import StoreError

    with DatasetStore.open(old / "store.zarr") as st:
        cache = StateCache.open(st, MODEL, persist=False)
        with pytest.raises(StoreError, match="stores keys with layout"):
            cache.state_keys(st.read(slice(0, 1), ["state"])["state"], replace(KEY_SPEC, params={"rotation_scale": 0.05}))
        with pytest.raises(StoreError, match="stores keys with layout"):
            cache.state_keys(st.read(slice(0, 1), ["state"])["state"], replace(KEY_SPEC, fields=KEY_SPEC.fields[::-1]))


def test_old_stage1_run_loads_evaluates_and_resumes(old):
    from rmtl.train.config import Stage1Config, Stage2Config
    from rmtl.train.evaluate import evaluate_policy_success, load_checkpoint, resolve_checkpoint
    from rmtl.train.stage1 import train_stage1
    from rmtl.train.stage2 import worker_stage1_config

    run = old / "stage1_run"
    ck = resolve_checkpoint(run)
    model, meta, normalizer = load_checkpoint(ck)
    assert meta["num_timesteps"] == 32
    saved = Stage1Config.from_yaml(run / "config.yaml")
    # written when the shaping had adaptive_bounds / phase_offset: read as the earlier reconstruction
    shaping = saved.reward.shaping
    assert (shaping.bounds, shaping.band) == ("widen_only", "phase_offset: true" in (run / "config.yaml").read_text())
    from rmtl.tasks import get_task

    res = evaluate_policy_success(model, saved.env, episodes=1, seed=0, normalizer=normalizer, task=get_task())
    assert res.episodes == 1
    assert worker_stage1_config(Stage2Config.make(worker=str(run))).phase_input
    resumed = train_stage1(saved.replace(total_timesteps=64, output_dir=str(run)))
    assert (resumed / "run_resume_000000032.json").is_file()
    assert json.loads((resumed / "summary.json").read_text())["env_steps"] == 64

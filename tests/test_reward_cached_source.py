"""The cached reward path (rmtl.reward.cached_source): hits return stored rows, misses are
rendered and embedded, appended misses become hits, and the reward wrapper can use it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from rmtl.errors import ConfigError, StoreError
from rmtl.reward.phase import RulePhaseSelector
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.state import KEY_SPEC

VIEWS = ["wide_view", "close_up"]
SPEC = "rmtl-fetch-tiny@random"
TASK_KEYS = {"key_spec": KEY_SPEC, "phase_labels": get_task().phases}
"""The task's key and phase labels a cached source keys and labels appended rows with."""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny rendered + embedded store (with its state cache) and the VLM that embedded it.

    The store is embedded with this very VLM object: ``@random`` weights are drawn anew on
    every load, so a second load_vlm(SPEC) would be a different model under the same id.
    """
    import torch

    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig
    from rmtl.vlm import load_vlm
    from storage.cache import StateCache
    from storage.dataset import DatasetStore

    torch.manual_seed(0)
    vlm = load_vlm(SPEC)
    path = tmp_path_factory.mktemp("live") / "s.zarr"
    render_to_store(path, RolloutConfig.make(episodes=2, views=VIEWS, resolution=64), progress=False)
    embed_store(path, vlm, progress=False)
    with DatasetStore.open(path) as st:
        StateCache.open(st, vlm.model_id)
    return path, vlm.model_id, vlm


def _source(path, vlm, **kw):
    from rmtl.reward.cached_source import CachedEmbeddingSource

    return CachedEmbeddingSource.open(path, vlm, **{**TASK_KEYS, **kw})


def _no_render(idx):
    raise AssertionError(f"rendered {list(idx)} although every state should hit")


def _scorer(store, model_id):
    from pipeline.stores.stored_text import stored_text_embeddings
    from rmtl.reward.scorer import PhasedScorer

    return PhasedScorer(stored_text_embeddings(store, model_id, get_task().prompts()), 0.9, VIEWS)


def test_stored_key_hits_its_row_and_gives_the_same_reward(built):
    from rmtl.reward.source import EmbeddingSource

    path, model_id, vlm = built
    with _source(path, vlm, radius=0.0) as src:
        assert isinstance(src, EmbeddingSource)
        store = src.store
        rows = np.array([0, 5, store.num_rows - 1])
        cols = store.read(rows, ["state", "frames"])
        res = src.lookup(cols["state"], _no_render)
        assert res.hit.all() and np.array_equal(res.rows, rows)
        stored = store.embeddings(model_id, rows).astype(np.float32)
        assert np.array_equal(res.embeddings, stored)  # exactly that row's embeddings
        scorer = _scorer(store, model_id)
        phase = np.array([0, 1, 2])
        np.testing.assert_array_equal(scorer(res.embeddings).active(phase), scorer(stored).active(phase))
        # and the same reward as embedding the row's frames afresh (up to float16 storage)
        fresh = vlm.encode_images(cols["frames"].reshape(-1, 64, 64, 3)).reshape(len(rows), len(VIEWS), -1)
        np.testing.assert_allclose(scorer(res.embeddings).aggregate, scorer(fresh).aggregate, atol=2e-3)
        assert src.stats.hit_rate == 1.0 and src.stats.rendered == 0


def test_far_key_is_a_miss_and_only_misses_are_rendered(built):
    path, model_id, vlm = built
    with _source(path, vlm, radius=0.005) as src:
        store = src.store
        states = store.read([1, 2, 3], ["state"])["state"].copy()
        states[1, 0:3] += 0.3  # gripper 30 cm away: far from every stored key
        frames = np.random.default_rng(0).integers(0, 256, (3, len(VIEWS), 64, 64, 3), dtype=np.uint8)
        asked = []
        res = src.lookup(states, lambda idx: asked.append(list(idx)) or frames[idx])
        assert asked == [[1]]
        assert res.hit.tolist() == [True, False, True] and res.rows[1] == -1
        assert res.distances[1] > 0.2
        expect = vlm.encode_images(frames[1]).astype(np.float16).astype(np.float32)
        np.testing.assert_allclose(res.embeddings[1], expect, atol=1e-6)
        assert store.num_rows == src.store.num_rows  # nothing appended without append=True
    with pytest.raises(StoreError, match="read-only|append"):
        from rmtl.reward.cached_source import CachedEmbeddingSource
        from storage.cache import StateCache
        from storage.dataset import DatasetStore

        with DatasetStore.open(path) as ro:
            CachedEmbeddingSource(StateCache.open(ro, model_id, persist=False), vlm, append=True, **TASK_KEYS)


def test_appended_misses_become_hits_and_persist(built, tmp_path):
    from rmtl.reward.cached_source import LIVE_EPISODE, env_renderer
    from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv
    from storage.cache import StateCache
    from storage.dataset import DatasetStore

    src_path, model_id, vlm = built
    path = tmp_path / "copy.zarr"
    shutil.copytree(src_path, path)
    shutil.copytree(Path(str(src_path) + ".cache"), Path(str(path) + ".cache"))
    env = FetchPickAndLiftEnv(views=VIEWS, resolution=64)
    try:
        env.reset(seed=12345, options={"difficulty": 1.0})
        render = env_renderer([env], VIEWS, 64)
        state = env.state[None]
        with _source(path, vlm, radius=0.0, append=True) as src:
            n0 = src.store.num_rows
            first = src.lookup(state, render)
            assert not first.hit[0] and first.rows[0] == n0 and src.store.num_rows == n0 + 1
            assert src.store.embedded_rows(model_id) == n0 + 1
            again = src.lookup(state, _no_render)
            assert again.hit[0] and again.rows[0] == n0
            np.testing.assert_array_equal(again.embeddings, first.embeddings)  # same reward either way
            live = src.store.read(n0, ["episode", "frames"])
            assert live["episode"] == LIVE_EPISODE
            np.testing.assert_array_equal(live["frames"], render(np.array([0]))[0])
    finally:
        env.close()
    with DatasetStore.open(path) as st:  # the index was saved with the new row: loads, hits
        cache = StateCache.open(st, model_id, persist=False)
        assert cache.status == "loaded" and cache.num_indexed == n0 + 1
        assert cache.lookup(cache.state_keys(state, KEY_SPEC), 0.0).rows.tolist() == [n0]


def test_reward_wrapper_runs_on_the_cached_source(built):
    from pipeline.stores.stored_text import stored_text_embeddings
    from conftest import reward_stack
    from rmtl.reward import PhasedScorer, RewardConfig
    from rmtl.reward.kinds.vlm import VLMKind
    from rmtl.tasks.fetch_lift.env import EnvConfig

    path, model_id, vlm = built
    with _source(path, vlm, radius=0.01) as src:
        scorer = PhasedScorer(stored_text_embeddings(src.store, model_id, get_task().prompts()), 0.9, VIEWS)
        cfg = get_task().reward_config(RewardConfig.make(model=SPEC, views=VIEWS, resolution=64))
        kind = VLMKind.from_config(cfg, vlm=vlm, source=src, scorer=scorer)
        venv = reward_stack(2, cfg, EnvConfig.make(views=VIEWS, resolution=64), kind=kind,
                            phase_selector=RulePhaseSelector(get_task().phases)).venv
        try:
            venv.reset()
            for _ in range(3):
                _, reward, _, infos = venv.step(np.zeros((2, 4), np.float32))
                assert np.isfinite(reward).all() and "score" in infos[0]["reward"]
        finally:
            venv.close()
        assert src.stats.states == 6 and src.stats.hits + src.stats.rendered == 6


def test_views_and_model_must_match(built):
    from types import SimpleNamespace

    from rmtl.reward.cached_source import CachedEmbeddingSource
    from storage.cache import StateCache
    from storage.dataset import DatasetStore

    path, model_id, vlm = built
    with DatasetStore.open(path) as st:
        cache = StateCache.open(st, model_id, persist=False)
        with pytest.raises(ConfigError, match="same model"):
            CachedEmbeddingSource(cache, SimpleNamespace(model_id="another-model"), **TASK_KEYS)
        with pytest.raises(ConfigError, match="not in the store"):
            CachedEmbeddingSource(cache, vlm, views=["front"], **TASK_KEYS)

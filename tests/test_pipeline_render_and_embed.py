import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.jobs.embed import embed_store
from pipeline.jobs.render import render_to_store
from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, format_summary, render_and_embed
from pipeline.jobs.rollout import RolloutConfig
from pipeline.stores.stored_text import stored_text_embeddings
from rmtl.errors import ModelLoadError, StoreError
from rmtl.reward.prompts import PromptConfig
from rmtl.tasks.fetch_lift.state import KEY_SPEC
from storage.cache import StateCache
from storage.dataset import DatasetStore
from rmtl.tasks import get_task

VIEWS = ["wide_view", "close_up"]
MODEL = "rmtl-fetch-tiny@random"


def tiny_rollout(**kw):
    return RolloutConfig.make(**{"episodes": 3, "views": VIEWS, "resolution": 64, **kw})


def test_render_resumes_without_duplicates(tmp_path):
    path = tmp_path / "s.zarr"
    first = render_to_store(path, tiny_rollout(episodes=2), progress=False)
    second = render_to_store(path, tiny_rollout(episodes=3), progress=False)
    assert (first.episodes_rendered, second.episodes_rendered, second.resumed) == (2, 1, True)
    with DatasetStore.open(path) as store:
        eps = store.episodes()
        assert sorted(eps) == [0, 1, 2]
        steps = store.read(fields=["episode", "step"])
        pairs = set(zip(steps["episode"].tolist(), steps["step"].tolist()))
        assert len(pairs) == store.num_rows  # no duplicated (episode, step)


@pytest.mark.slow
def test_embed_copies_image_embeddings_of_a_model_with_the_same_image_tower(tmp_path, monkeypatch):
    import torch

    from pipeline.train_vlm import save_model
    from rmtl.vlm import load_vlm

    path = tmp_path / "s.zarr"
    render_to_store(path, tiny_rollout(episodes=2), progress=False)
    first = embed_store(path, "rmtl-fetch-tiny", batch_size=16, progress=False)
    render_to_store(path, tiny_rollout(episodes=3), progress=False)  # rows the first model has not embedded
    tuned = load_vlm("rmtl-fetch-tiny", device="cpu")
    with torch.no_grad():
        tuned.model.token_embedding.weight.add_(0.01)  # text tower tuned, image tower locked
    (tmp_path / "tuned").mkdir()
    save_model(tuned, "rmtl-fetch-tiny", tmp_path / "tuned")
    tuned = load_vlm(str(tmp_path / "tuned"), device="cpu")
    encoded = []
    real = tuned.encode_images
    monkeypatch.setattr(tuned, "encode_images", lambda images, **kw: encoded.append(len(images)) or real(images, **kw))
    result = embed_store(path, tuned, batch_size=16, progress=False)
    n = result.rows_total
    assert (result.rows_copied, result.copied_from, result.rows_embedded) == (first.rows_total, first.model_id, n)
    assert sum(encoded) == (n - first.rows_total) * len(VIEWS)  # only the new rows went through the tower
    embed_store(path, "rmtl-fetch-tiny", batch_size=16, progress=False)  # the first model catches up
    with DatasetStore.open(path) as store:
        np.testing.assert_array_equal(store.embeddings(result.model_id, slice(0, first.rows_total)),
                                      store.embeddings(first.model_id, slice(0, first.rows_total)))
        np.testing.assert_allclose(store.embeddings(result.model_id).astype(np.float32),
                                   store.embeddings(first.model_id).astype(np.float32), atol=2e-3)
        assert store.embedding_info(result.model_id)["meta"]["image_embeddings_from"] == first.model_id
        ours, theirs = store.text_embeddings(result.model_id), store.text_embeddings(first.model_id)
        assert not np.allclose(ours[get_task().prompts().goal("grasp")[0]], theirs[get_task().prompts().goal("grasp")[0]])  # its own text tower
    other = embed_store(path, MODEL, batch_size=16, progress=False)  # another image tower: encoded
    assert other.rows_copied == 0 and other.copied_from is None


def test_render_refuses_resume_with_other_settings(tmp_path):
    path = tmp_path / "s.zarr"
    render_to_store(path, tiny_rollout(episodes=1), progress=False)
    with pytest.raises(StoreError, match="different settings"):
        render_to_store(path, tiny_rollout(episodes=2, seed=9), progress=False)


@pytest.mark.slow
def test_embed_resumes_and_stores_prompts(tmp_path):
    path = tmp_path / "s.zarr"
    render_to_store(path, tiny_rollout(episodes=2), progress=False)
    first = embed_store(path, MODEL, batch_size=16, progress=False)
    again = embed_store(path, MODEL, batch_size=16, progress=False)
    assert first.rows_embedded == first.rows_total and again.rows_embedded == 0
    with DatasetStore.open(path) as store:
        emb = store.embeddings(first.model_id)
        assert emb.shape == (store.num_rows, 2, first.embed_dim)
        assert np.allclose(np.linalg.norm(emb.astype(np.float32), axis=-1), 1, atol=2e-3)
        text = stored_text_embeddings(store, first.model_id, get_task().prompts())
        assert text.goals.shape == (3, first.embed_dim)


def test_render_and_embed_summary_and_cache(tmp_path):
    cfg = RenderAndEmbedConfig.make(store=str(tmp_path / "d.zarr"), episodes=2, views=VIEWS, resolution=64, model=MODEL)
    summary = render_and_embed(cfg, progress=False)
    text = format_summary(summary)
    assert "reward quality" in text and str(tmp_path / "d.zarr") in text
    for p in summary["cache_files"] + [summary["run_record"]]:
        assert Path(p).is_file()
    record = json.loads(Path(summary["run_record"]).read_text())
    assert record["config"]["model"] == MODEL and "git_commit" in record and "versions" in record
    assert isinstance(record["cpu"], str)  # speeds differ by CPU: every run names it
    with DatasetStore.open(cfg.store) as store:
        cache = StateCache.open(store, summary["model_id"])
        assert cache.status == "loaded"
        rows = store.read(fields=["state"])["state"]
        hit = cache.lookup(cache.state_keys(rows[:4], KEY_SPEC), radius=1e-6)
        assert hit.hit.all() and list(hit.rows) == [0, 1, 2, 3]


def test_bad_model_fails_before_rendering(tmp_path):
    cfg = RenderAndEmbedConfig.make(store=str(tmp_path / "x.zarr"), episodes=1, model="no-such-model")
    with pytest.raises(ModelLoadError, match="unknown model 'no-such-model'"):
        render_and_embed(cfg, progress=False)
    assert not (tmp_path / "x.zarr").exists()


KILL_SCRIPT = """
import sys
from pipeline.jobs.render import render_to_store
from pipeline.jobs.rollout import RolloutConfig
cfg = RolloutConfig.make(episodes=int(sys.argv[2]), views=["wide_view"], resolution=64, policy="random")
render_to_store(sys.argv[1], cfg, chunk=1, progress=False)
"""


@pytest.mark.slow
def test_sigkill_mid_render_then_resume_gives_exact_rows(tmp_path):
    path = tmp_path / "k.zarr"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(path), "12"], start_new_session=True)
    deadline = time.time() + 120
    rows = 0
    while time.time() < deadline and rows < 80:  # two random episodes are 82 rows
        time.sleep(0.3)
        try:
            with DatasetStore.open(path) as store:
                rows = store.num_rows
        except StoreError:
            pass
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert rows > 0, "the writer committed nothing before the deadline"
    with DatasetStore.open(path) as store:
        data = store.read(fields=["state", "episode", "step"])
        assert not np.any(np.all(data["state"] == 0, axis=1)), "no zero rows after a kill"
        committed_eps = store.episodes()
        assert all(len(r) == 41 for r in committed_eps.values()), "only whole episodes are committed"
    cfg = RolloutConfig.make(episodes=12, views=["wide_view"], resolution=64, policy="random")
    render_to_store(path, cfg, chunk=4, progress=False)  # the dead writer's lock is taken over
    with DatasetStore.open(path) as store:
        assert store.num_rows == 12 * 41
        eps = store.read(fields=["episode", "step"])
        assert len(set(zip(eps["episode"].tolist(), eps["step"].tolist()))) == 12 * 41


def test_missing_prompt_embedding_is_a_store_error(tmp_path):
    path = tmp_path / "s.zarr"
    render_to_store(path, tiny_rollout(episodes=1), progress=False)
    result = embed_store(path, MODEL, batch_size=16, progress=False)
    with DatasetStore.open(path) as store:
        with pytest.raises(StoreError, match="has no text embedding of 'a never embedded goal'"):
            stored_text_embeddings(store, result.model_id, get_task().prompts(PromptConfig(grasp="a never embedded goal")))

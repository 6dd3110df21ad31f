"""The state cache over a catalogue (atlas + overlay) and its background writer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rmtl.errors import StoreError
from rmtl.tasks.fetch_lift.layout import store_description
from rmtl.tasks.fetch_lift.state import KEY_SPEC

VIEWS = ["wide_view", "close_up"]
MODEL = "m__test"
DIM = 8


def _store(path, n, seed, renderer_id="mj-test"):
    """A frames-less store of n random states with random unit embeddings of MODEL."""
    from storage.dataset import DatasetStore

    rng = np.random.default_rng(seed)
    st = DatasetStore.create(path, **store_description(), views=VIEWS, resolution=64, frames=False,
                             renderer={"renderer_id": renderer_id} if renderer_id else None)
    states = rng.uniform(-1, 1, (n, 25)).astype(np.float32)
    st.append({"state": states, "episode": np.zeros(n, np.int64), "step": np.arange(n, dtype=np.int32),
               "phase_rule": np.zeros(n, np.int8), "success": np.zeros(n, bool), "difficulty": np.zeros(n, np.float32)})
    emb = rng.normal(size=(n, len(VIEWS), DIM)).astype(np.float32)
    st.add_embeddings(MODEL, 0, emb / np.linalg.norm(emb, axis=-1, keepdims=True))
    return st, states


def _live_rows(states, keys):
    n = len(states)
    return {"state": states, "key": keys, "episode": np.full(n, -1, np.int64), "step": np.arange(n, dtype=np.int32),
            "phase_rule": np.zeros(n, np.int8), "success": np.zeros(n, bool), "difficulty": np.full(n, np.nan, np.float32)}


def test_catalogue_hits_atlas_and_overlay_and_misses(tmp_path):
    from storage.catalogue import BackgroundAppender, StoreCatalogue
    from storage.dataset import DatasetStore

    st, atlas_states = _store(tmp_path / "atlas.zarr", 50, 0)
    atlas_emb = st.embeddings(MODEL, slice(0, 50))
    st.close()
    cat = StoreCatalogue.open([tmp_path / "atlas.zarr"], MODEL, overlay=tmp_path / "run" / "overlay.zarr", key_spec=KEY_SPEC,
                              renderer_id="mj-test")
    writer = BackgroundAppender(cat)
    keys = cat.state_keys(atlas_states[:3], KEY_SPEC)
    res, emb = cat.fetch(keys, 1e-6)
    assert res.hit.all() and (res.source == 0).all() and list(res.rows) == [0, 1, 2]
    np.testing.assert_array_equal(emb, atlas_emb[:3])
    # a state far from everything misses; after a background append it hits in the overlay
    new = np.full((1, 25), 5.0, np.float32)
    k = cat.state_keys(new, KEY_SPEC)
    res, emb = cat.fetch(k, 1e-6)
    assert not res.hit.any() and res.source[0] == -1 and np.isnan(emb.astype(np.float32)).all()
    fresh = np.ones((1, len(VIEWS), DIM), np.float32) / np.sqrt(DIM)
    assert writer.submit(_live_rows(new, k), fresh)
    writer.flush()
    res, emb = cat.fetch(k, 1e-6, views=["close_up"])
    assert res.hit.all() and res.source[0] == 1 and res.rows[0] == 0
    np.testing.assert_allclose(emb[0, 0].astype(np.float32), fresh[0, 1], atol=1e-3)
    writer.close()
    cat.close()
    with DatasetStore.open(tmp_path / "run" / "overlay.zarr") as ov:  # committed, not in the atlas
        assert ov.num_rows == 1 and ov.embedded_rows(MODEL) == 1 and not ov.has_frames
    with DatasetStore.open(tmp_path / "atlas.zarr") as at:
        assert at.num_rows == 50


def test_catalogue_refuses_other_renderer_or_model(tmp_path):
    from storage.catalogue import StoreCatalogue

    _store(tmp_path / "a.zarr", 5, 1, renderer_id="mj-other")[0].close()
    with pytest.raises(StoreError, match="rendered by renderer mj-other but this run renders with mj-test") as e:
        StoreCatalogue.open([tmp_path / "a.zarr"], MODEL, renderer_id="mj-test")
    assert "\n" not in str(e.value)
    with pytest.raises(StoreError, match="no embeddings of 'other__model'"):
        StoreCatalogue.open([tmp_path / "a.zarr"], "other__model")
    _store(tmp_path / "no_renderer_id.zarr", 5, 2, renderer_id=None)[0].close()
    cat = StoreCatalogue.open([tmp_path / "no_renderer_id.zarr"], MODEL, renderer_id="mj-old", unrecorded_renderer_id="mj-old")
    cat.close()


WRITER = textwrap.dedent('''
    import sys, numpy as np
    sys.path.insert(0, {tests!r})
    from test_storage_catalogue import _live_rows, MODEL, VIEWS, DIM, KEY_SPEC
    from storage.catalogue import BackgroundAppender, StoreCatalogue
    cat = StoreCatalogue.open([{atlas!r}], MODEL, overlay={overlay!r}, renderer_id="mj-test", key_spec=KEY_SPEC)
    w = BackgroundAppender(cat, max_pending=1000)
    rng = np.random.default_rng({seed})  # a new seed per writer: states unique across rounds
    print("ready", flush=True)
    for i in range(100000):
        s = rng.uniform(2, 3, (4, 25)).astype(np.float32)
        e = rng.normal(size=(4, len(VIEWS), DIM)).astype(np.float32)
        w.submit(_live_rows(s, cat.state_keys(s, KEY_SPEC)), e)
        if i % 50 == 0:
            w.flush()
''')


@pytest.mark.slow
def test_kill_during_background_append_leaves_a_consistent_store(tmp_path):
    from storage.cache import StateCache
    from storage.dataset import DatasetStore

    _store(tmp_path / "atlas.zarr", 10, 0)[0].close()
    overlay = tmp_path / "overlay.zarr"
    for round_ in range(2):
        # Each writer draws other states: with the same seed, a second writer that gets fewer batches
        # done than the first (a loaded machine) repeats its states, and a lookup finds the first copy.
        code = WRITER.format(tests=os.path.dirname(__file__), atlas=str(tmp_path / "atlas.zarr"),
                             overlay=str(overlay), seed=3 + round_)
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        import time

        time.sleep(1.5 + round_)
        p.send_signal(signal.SIGKILL)
        p.wait()
        with DatasetStore.open(overlay, "a") as st:  # the dead writer's lock is taken over
            n = st.num_rows
            assert n > 0 and n % 4 == 0, "a partial batch is visible"
            assert st.embedded_rows(MODEL) == n
            state = st.read(slice(0, n), ["state"])["state"]
            assert np.isfinite(state).all() and (state >= 2).all()  # no zero (unwritten) rows
            assert np.isfinite(st.embeddings(MODEL, slice(0, n)).astype(np.float32)).all()
            cache = StateCache.open(st, MODEL, preload=True)
            assert cache.num_indexed == n
            res = cache.lookup(cache.state_keys(state[-4:], KEY_SPEC), 1e-6)
            assert res.hit.all() and list(res.rows) == list(range(n - 4, n))

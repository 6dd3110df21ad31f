"""FAISS state cache: hits, radius misses, staleness and rebuilds, the live add path, HNSW."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rmtl.errors import StoreError
from rmtl.tasks.fetch_lift.layout import store_description
from rmtl.tasks.fetch_lift.state import KEY_SPEC
from storage import DatasetStore, StateCache, set_faiss_threads
from storage.testing import synthetic_embeddings, synthetic_rows

set_faiss_threads(1)
VIEWS = ["wide_view", "close_up"]
M = "hf-hub:org/model"


def store_with(path, rows: int, embedded: int | None = None) -> DatasetStore:
    s = DatasetStore.create(path, **store_description(), views=VIEWS, resolution=8, frames=False)
    s.append(synthetic_rows(0, rows, frames=False))
    s.add_embeddings(M, 0, synthetic_embeddings(0, rows if embedded is None else embedded))
    return s


def test_stored_key_hits_its_row_and_far_key_misses(tmp_path):
    s = store_with(tmp_path / "d.zarr", 60)
    cache = StateCache.open(s, M)
    assert cache.status == "built" and cache.num_indexed == 60
    keys = s.read(fields=["key"])["key"]
    res = cache.lookup(keys, radius=0.0)
    assert res.hit.all() and res.rows.tolist() == list(range(60)) and np.all(res.distances == 0)

    # radius is in key units (metres), not squared: 0.015 away is a miss at radius 0.01
    # (0.015**2 < 0.01 would wrongly hit) and 0.005 away is a hit.
    off = np.zeros(11, np.float32)
    off[0] = 0.015
    near, far = keys[10] + off / 3, keys[10] + off
    res = cache.lookup(np.stack([near, far]), radius=0.01)
    assert res.hit.tolist() == [True, False] and res.rows.tolist() == [10, -1]
    assert res.distances[0] == pytest.approx(0.005, abs=1e-5) and res.distances[1] == pytest.approx(0.015, abs=1e-5)

    res, emb = cache.fetch(np.stack([keys[7], far, keys[3]]), radius=0.01, views=["close_up"])
    assert res.hit.tolist() == [True, False, True] and emb.shape == (3, 1, 4) and emb.dtype == np.float16
    np.testing.assert_array_equal(emb[[0, 2]], s.embeddings(M, [7, 3], views=["close_up"]))
    assert np.isnan(emb[1]).all()

    states = s.read([4], ["state"])["state"]
    assert cache.lookup(cache.state_keys(states, KEY_SPEC), 0.0).rows.tolist() == [4]
    pre = StateCache.open(s, M, preload=True)
    np.testing.assert_array_equal(pre.fetch(keys[[5, 6]], 0.0)[1], s.embeddings(M, [5, 6]))


def test_index_covers_only_embedded_rows(tmp_path):
    s = store_with(tmp_path / "d.zarr", 30, embedded=20)
    cache = StateCache.open(s, M)
    keys = s.read(fields=["key"])["key"]
    assert cache.num_indexed == 20
    assert cache.lookup(keys[25:26], 0.0).rows[0] != 25  # no embeddings yet: never returned
    assert StateCache.open(s).num_indexed == 30  # a key-only cache covers all committed rows


def test_stale_index_is_detected_and_rebuilt(tmp_path):
    path = tmp_path / "d.zarr"
    s = store_with(path, 40)
    StateCache.open(s, M)
    assert StateCache.open(s, M).status == "loaded"

    # rows appended after saving: extended to the new rows (committed rows never change)
    s.append(synthetic_rows(40, 10, frames=False), embeddings={M: synthetic_embeddings(40, 10)})
    c = StateCache.open(s, M)
    assert c.status == "extended" and c.num_indexed == 50
    assert c.lookup(s.read([45], ["key"])["key"], 0.0).rows.tolist() == [45]
    side = json.loads(c.sidecar_location.read_bytes())
    assert side["rows_indexed"] == 50 and side["store_uuid"] == s.uuid and side["model_id"] == M

    # an index that claims more rows than the store has
    side["rows_indexed"] = 99
    c.sidecar_location.write_json(side)
    assert StateCache.open(s, M).status.startswith("rebuilt: index covers 99 rows")

    # a damaged index file
    c.index_location.write_bytes(c.index_location.read_bytes()[:-8] + b"garbage!")
    assert StateCache.open(s, M).status == "rebuilt: index file does not match its sidecar"

    # the same cache file name used for another model
    s.add_embeddings("other", 0, synthetic_embeddings(0, 50))
    assert StateCache.open(s, "other", name=c.name).status.startswith("rebuilt: model_id changed")

    # a different store at the same path (re-created): new uuid
    s.close()
    s2 = DatasetStore.create(path, **store_description(), views=VIEWS, resolution=8, frames=False, overwrite=True)
    s2.append(synthetic_rows(100, 5, frames=False))
    s2.add_embeddings(M, 0, synthetic_embeddings(100, 5))
    c2 = StateCache.open(s2, M)
    assert c2.status.startswith("rebuilt: store_uuid changed") and c2.num_indexed == 5
    assert c2.lookup(s2.read(fields=["key"])["key"], 0.0).rows.tolist() == list(range(5))


def test_live_add(tmp_path):
    s = store_with(tmp_path / "d.zarr", 20)
    c = StateCache.open(s, M)
    new = synthetic_rows(20, 4, frames=False)
    rows = s.append(new, embeddings={M: synthetic_embeddings(20, 4)})
    keys = s.read(slice(20, 24), ["key"])["key"]
    with pytest.raises(StoreError, match="must continue the index"):
        c.add(keys, [21, 22, 23, 24])
    with pytest.raises(StoreError, match="differ from the keys stored"):
        c.add(keys + 1, rows)
    c.add(keys, rows)
    assert c.lookup(keys, 0.0).rows.tolist() == [20, 21, 22, 23]
    with pytest.raises(StoreError, match="is not committed"):
        c.add(keys[:1], [24])
    c.save()
    assert StateCache.open(s, M).status == "loaded"


def test_hnsw(tmp_path):
    s = store_with(tmp_path / "d.zarr", 300)
    keys = s.read(fields=["key"])["key"]
    c = StateCache.open(s, M, kind="hnsw", hnsw_m=16)
    assert c.status == "built" and c.index_location.path.endswith("-hnsw.faiss")
    res = c.lookup(keys, 1e-6)
    assert res.hit.mean() >= 0.98 and (res.rows[res.hit] == np.arange(300)[res.hit]).all()
    again = StateCache.open(s, M, kind="hnsw", hnsw_m=16)
    assert again.status == "loaded"
    np.testing.assert_array_equal(again.lookup(keys, 1e-6).rows, res.rows)
    assert StateCache.open(s, M, kind="hnsw", hnsw_m=8).status.startswith("rebuilt: hnsw_m changed")
    with pytest.raises(StoreError, match="no embeddings of model 'nope'"):
        StateCache.open(s, "nope")

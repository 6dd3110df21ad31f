"""Schema v2 stores: actions and episode ends per row, dimension names and descriptions on
every array, layout attributes; xarray and plain zarr read them; v1 stores still open and
say what they lack (storage.dataset, docs/storage.md)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import zarr

from rmtl.errors import StoreError
from rmtl.tasks.fetch_lift.layout import store_description
from rmtl.tasks.fetch_lift.state import KEY_SPEC

VIEWS = ("wide_view", "close_up")


def _rows(n: int, episode: int = 0, actions: bool = True) -> dict:
    rng = np.random.default_rng(episode)
    out = {"state": rng.normal(size=(n, 25)).astype(np.float32), "episode": np.full(n, episode),
           "step": np.arange(n, dtype=np.int32), "phase_rule": np.zeros(n, np.int8), "success": np.zeros(n, bool),
           "difficulty": np.full(n, 0.5, np.float32), "frames": rng.integers(0, 255, (n, 2, 8, 8, 3), np.uint8)}
    if actions:
        act = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
        act[0] = np.nan
        out.update(action=act, terminated=np.arange(n) == n - 1, truncated=np.zeros(n, bool))
    return out


@pytest.fixture
def v2(tmp_path):
    from storage.dataset import DatasetStore

    path = tmp_path / "v2.zarr"
    with DatasetStore.create(path, **store_description(), views=VIEWS, resolution=8) as st:
        st.append(_rows(5, 0))
        st.append(_rows(3, 1))
        st.add_embeddings("m", 0, np.ones((8, 2, 4), np.float32))
        st.set_text_embeddings("m", {"a": np.ones(4)})
        st.set_prompt_set_embeddings("m", "abc123abc123", ["baseline", "grasp"], ["a", "b"],
                                     np.ones((2, 4)), {"name": "s"})
    return path


def test_actions_and_episode_ends_are_stored(v2):
    from storage.dataset import DatasetStore

    with DatasetStore.open(v2, "r") as st:
        assert st.schema_version == 2 and st.has_actions
        st.require_actions("export it")
        cols = st.read(fields=["action", "terminated", "truncated"])
    assert cols["action"].shape == (8, 4) and np.isnan(cols["action"][[0, 5]]).all()
    assert cols["terminated"].tolist() == [False] * 4 + [True] + [False, False, True]
    with DatasetStore.open(v2, "a", key_spec=KEY_SPEC) as st:  # rows without actions (the live cache path): NaN and False
        st.append({k: v for k, v in _rows(2, 2, actions=False).items()})
        cols = st.read(rows=slice(8, 10), fields=["action", "terminated"])
    assert np.isnan(cols["action"]).all() and not cols["terminated"].any()


def test_every_array_has_dimension_names_and_a_description(v2):
    g = zarr.open_group(str(v2), mode="r")
    arrays = {name: a for name, a in g.arrays()}
    for sub in ("embeddings", "text_embeddings"):
        arrays.update({f"{sub}/{n}": a for n, a in g[sub].arrays()})
    for model in g["prompt_sets"].group_keys():
        arrays.update({f"prompt_sets/{model}/{n}": a for n, a in g["prompt_sets"][model].arrays()})
    assert {"frames", "state", "action", "terminated", "embeddings/m", "text_embeddings/m",
            "prompt_sets/m/abc123abc123"} <= set(arrays)
    for name, a in arrays.items():
        assert a.metadata.dimension_names and len(a.metadata.dimension_names) == a.ndim, name
        assert a.attrs["description"], name
    assert arrays["frames"].metadata.dimension_names == ("row", "view", "height", "width", "channel")
    info = g.attrs["rmtl"]
    layout = info["layout"]
    assert len(layout["state_fields"]) == 25 and layout["phase_codes"] == {"0": "approach", "1": "align", "2": "grasp"}
    assert layout["action_fields"] == ["dx", "dy", "dz", "gripper"] and "baseline" in layout["prompt_roles"]
    assert info["views"] == list(VIEWS)
    assert arrays["prompt_sets/m/abc123abc123"].attrs["roles"] == ["baseline", "grasp"]


def _open_xr(path, **kw):
    xr = pytest.importorskip("xarray")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: consolidated metadata is not in the v3 spec yet
        return xr.open_zarr(str(path), **kw)


def test_xarray_reads_names_as_coordinates(v2):
    """A plain xarray.open_zarr labels views and state/action/key fields: select by name."""
    ds = _open_xr(v2)
    n = ds.attrs["rmtl_commit"]["rows"]
    ds = ds.isel(row=slice(0, n))
    assert ds.sizes["row"] == 8 and ds["state"].dims == ("row", "state_field")
    assert ds["frames"].dims == ("row", "view", "height", "width", "channel")
    assert list(ds["view"].values) == list(VIEWS)
    assert list(ds["state_field"].values) == ds.attrs["rmtl"]["layout"]["state_fields"]
    assert list(ds["action_field"].values) == ["dx", "dy", "dz", "gripper"] and ds.sizes["key_field"] == 11
    rows = [_rows(5, 0), _rows(3, 1)]
    frames = np.concatenate([r["frames"] for r in rows])
    np.testing.assert_array_equal(ds.sel(view="close_up")["frames"].values, frames[:, 1])
    state = np.concatenate([r["state"] for r in rows])
    np.testing.assert_array_equal(ds["state"].sel(state_field="cube_z").values, state[:, 5])
    np.testing.assert_array_equal(ds["action"].sel(action_field="gripper").values[1:5], rows[0]["action"][1:, 3])
    emb = _open_xr(v2, group="embeddings")
    assert emb["m"].dims == ("row", "view", "embed_dim") and list(emb["view"].values) == list(VIEWS)
    assert emb["m"].sel(view="wide_view").shape == (8, 4)


def test_older_stores_get_coordinates_from_their_next_writer(v2):
    """A v2 store made before coordinate arrays: xarray sees no names until a writer opens it."""
    from storage.dataset import DatasetStore

    g = zarr.open_group(str(v2), mode="r+", use_consolidated=False)
    for node in ("view", "state_field", "key_field", "action_field", "embeddings/view"):
        del g[node]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(v2))
    assert "view" not in _open_xr(v2).coords
    with DatasetStore.open(v2, "r") as st:  # readers never write
        assert len(st) == 8
    assert "view" not in _open_xr(v2).coords
    DatasetStore.open(v2, "a", key_spec=KEY_SPEC).close()
    ds = _open_xr(v2)
    assert list(ds["view"].values) == list(VIEWS) and "cube_z" in ds["state_field"].values
    chunk = v2 / "view" / "c" / "0"  # the names are checked like any chunk
    chunk.write_bytes(chunk.read_bytes()[:-5] + b"xxxxx")
    with DatasetStore.open(v2, "r") as st:
        damage = st.verify().damage
    assert [d.describe() for d in damage] == [
        "view chunk 0 names 0-1: checksum mismatch (the chunk's bytes changed or it was truncated)"]
    with DatasetStore.open(v2, "a") as st, pytest.raises(StoreError, match="model id 'view' is reserved"):
        st.add_embeddings("view", 0, np.ones((8, 2, 4), np.float32))


def test_an_outside_reader_sees_only_committed_rows(v2):
    """A writer killed after writing rows but before its commit: the docs' plain-zarr reader
    (committed count from the root attribute) never sees those rows."""
    g = zarr.open_group(str(v2), mode="r+", use_consolidated=False)
    for name in ("state", "episode", "step"):
        a = g[name]
        a.resize((12, *a.shape[1:]))  # 4 uncommitted rows, as zeros
    # --- the reader of docs/storage.md ---
    root = zarr.open_group(str(v2), mode="r", use_consolidated=False)
    n = root.attrs["rmtl_commit"]["rows"]
    state = root["state"][:n]
    episode = root["episode"][:n]
    # ---
    assert root["state"].shape[0] == 12 and n == 8 and len(state) == len(episode) == 8
    assert (episode >= 0).all() and np.isfinite(state).all()


def _make_v1(path):
    """What a store made before schema v2 looks like: no step arrays, version 1."""
    from storage.dataset import DatasetStore

    with DatasetStore.create(path, **store_description(), views=VIEWS, resolution=8) as st:
        st.append(_rows(4, 0, actions=False))
    from conftest import as_schema_v1

    as_schema_v1(path)
    return path


def test_v1_stores_open_and_say_what_they_lack(tmp_path):
    from storage.dataset import DatasetStore

    path = _make_v1(tmp_path / "v1.zarr")
    with DatasetStore.open(path, "r") as st:
        assert st.schema_version == 1 and not st.has_actions and len(st) == 4
        assert "action" not in st.read()
        with pytest.raises(StoreError) as err:
            st.require_actions("be exported as a Minari dataset")
    msg = str(err.value)
    assert "\n" not in msg and "schema v1" in msg and "no actions" in msg and "render" in msg
    with DatasetStore.open(path, "a", key_spec=KEY_SPEC) as st:  # derived data can still be added
        st.add_embeddings("m", 0, np.ones((4, 2, 4), np.float32))
        st.set_prompt_set_embeddings("m", "abc123abc123", ["baseline"], ["a"], np.ones((1, 4)), {"name": "s"})
        st.append(_rows(2, 1, actions=False))
        with pytest.raises(StoreError, match="schema v1.*no actions"):
            st.append(_rows(2, 2))
    with DatasetStore.open(path, "r") as st:
        assert st.prompt_set_ids("m") == ["abc123abc123"] and len(st) == 6
    json.loads((path / "zarr.json").read_text())

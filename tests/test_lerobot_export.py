"""``rmtl export lerobot``: a tiny real store (2 episodes, 2 views, 64 px) exported and
checked against the LeRobot v3.0 layout as LeRobot's own reader defines it
(``lerobot.datasets.utils`` / ``LeRobotDatasetMetadata``; docs/storage.md): path templates
that resolve to files, Parquet columns and Arrow types, episode index ranges, video frame
counts, sizes and timestamps decoded with PyAV, stats, tasks, and the VLM reward's
provenance; values against the store and the Minari export of the same store."""

from __future__ import annotations

import json
import sys

import av
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rmtl.cli import run

VIEWS = ["wide_view", "close_up"]
# LeRobot v3.0 (lerobot.datasets.utils): the path templates and the default features.
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
DEFAULT_FEATURES = {"timestamp": "float32", "frame_index": "int64", "episode_index": "int64", "index": "int64",
                    "task_index": "int64"}
EPISODE_COLUMNS = {"episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                   "dataset_to_index", "meta/episodes/chunk_index", "meta/episodes/file_index"}
STATS = {"min", "max", "mean", "std", "count"}


@pytest.fixture(scope="module")
def exported(tiny_store, tmp_path_factory):
    """The session's tiny store (2 episodes of VIEWS at 64 px, read only), and its export through the
    command line."""
    from conftest import TINY_STORE

    assert TINY_STORE["views"] == VIEWS and TINY_STORE["episodes"] == 2 and TINY_STORE["resolution"] == 64
    d = tmp_path_factory.mktemp("lerobot")
    store = str(tiny_store)
    out = d / "ds"
    assert run(["export", "lerobot", store, "--prompts", "paper", "--out", str(out)]) == 0
    return store, out


def _episodes(root):
    return pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()


def test_info_follows_the_v3_spec_and_records_the_reward(exported):
    from rmtl.reward.prompt_sets import load_prompt_set
    from rmtl.vlm.spec import parse_spec
    from storage.dataset import DatasetStore

    store, root = exported
    info = json.loads((root / "meta" / "info.json").read_text())
    with DatasetStore.open(store) as st:
        episodes = st.episodes()
        n_frames = sum(len(r) - 1 for r in episodes.values())  # T steps: T + 1 rows, T frames
    assert info["codebase_version"] == "v3.0" and info["fps"] == 25 and info["robot_type"] == "fetch"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (len(episodes), n_frames, 1)
    assert info["splits"] == {"train": f"0:{len(episodes)}"} and info["chunks_size"] == 1000
    assert info["data_path"] == DATA_PATH and info["video_path"] == VIDEO_PATH
    feats = info["features"]
    for name, dtype in DEFAULT_FEATURES.items():
        assert feats[name] == {"dtype": dtype, "shape": [1], "names": None}
    assert feats["observation.state"]["shape"] == [25] and feats["observation.state"]["names"][5] == "cube_z"
    assert feats["action"] == {"dtype": "float32", "shape": [4], "names": ["dx", "dy", "dz", "gripper"]}
    assert feats["next.reward_vlm"]["dtype"] == "float32" and feats["next.done"]["dtype"] == "bool"
    for v in VIEWS:
        f = feats[f"observation.images.{v}"]
        assert f["dtype"] == "video" and f["shape"] == [64, 64, 3] and f["names"] == ["height", "width", "channels"]
        assert {k: f["info"][k] for k in ("video.height", "video.width", "video.codec", "video.pix_fmt",
                                          "video.fps", "video.is_depth_map", "has_audio")} == {
            "video.height": 64, "video.width": 64, "video.codec": "h264", "video.pix_fmt": "yuv420p",
            "video.fps": 25.0, "video.is_depth_map": False, "has_audio": False}
    reward = info["rmtl"]["reward_vlm"]
    assert reward["column"] == "next.reward_vlm" and reward["model_id"] == parse_spec("rmtl-fetch-tiny").model_id
    assert reward["prompt_set_id"] == load_prompt_set("paper").id and reward["alpha"] == 0.9
    assert reward["bounds"] == "adapted" and {"initial_low", "enabled"} <= set(reward["shaping"])
    tasks = pd.read_parquet(root / "meta" / "tasks.parquet")  # LeRobot: task strings are the index
    assert tasks["task_index"].tolist() == [0] and tasks.index[0].startswith("Pick up the cube")


def test_frames_episodes_and_paths(exported):
    from storage.dataset import DatasetStore

    store, root = exported
    info = json.loads((root / "meta" / "info.json").read_text())
    table = pq.read_table(root / DATA_PATH.format(chunk_index=0, file_index=0))
    video_keys = {k for k, f in info["features"].items() if f["dtype"] == "video"}
    assert set(table.column_names) == set(info["features"]) - video_keys
    types = {f.name: f.type for f in table.schema}
    assert types["observation.state"] == pa.list_(pa.float32(), 25) and types["action"] == pa.list_(pa.float32(), 4)
    for name, f in info["features"].items():
        if name not in video_keys and f["shape"] == [1]:
            assert types[name] == pa.from_numpy_dtype(np.dtype(f["dtype"])), name
    data = table.to_pydict()
    n = info["total_frames"]
    assert table.num_rows == n and data["index"] == list(range(n))
    episodes = _episodes(root)
    assert EPISODE_COLUMNS <= set(episodes[0]) and [e["episode_index"] for e in episodes] == [0, 1]
    with DatasetStore.open(store) as st:
        rows = st.episodes()
        cols = st.read(fields=["state", "action", "terminated"])
    for ep, (e, r) in zip(episodes, sorted(rows.items())):
        lo, hi = ep["dataset_from_index"], ep["dataset_to_index"]
        assert hi - lo == ep["length"] == len(r) - 1 and ep["rmtl/store_episode"] == e
        assert (root / info["data_path"].format(chunk_index=ep["data/chunk_index"],
                                                file_index=ep["data/file_index"])).is_file()
        assert data["episode_index"][lo:hi] == [ep["episode_index"]] * ep["length"]
        assert data["frame_index"][lo:hi] == list(range(ep["length"]))
        np.testing.assert_allclose(data["timestamp"][lo:hi], np.arange(ep["length"]) / 25, atol=1e-6)
        np.testing.assert_array_equal(np.array(data["observation.state"][lo:hi], np.float32), cols["state"][r[:-1]])
        np.testing.assert_array_equal(np.array(data["action"][lo:hi], np.float32), cols["action"][r[1:]])
        assert data["next.done"][lo:hi] == [False] * (ep["length"] - 1) + [True]
        assert data["next.success"][lo:hi] == cols["terminated"][r[1:]].tolist()
        for key in video_keys:
            path = root / info["video_path"].format(video_key=key, chunk_index=ep[f"videos/{key}/chunk_index"],
                                                    file_index=ep[f"videos/{key}/file_index"])
            assert path.is_file()
            assert ep[f"videos/{key}/from_timestamp"] == pytest.approx(lo / 25)
            assert ep[f"videos/{key}/to_timestamp"] == pytest.approx(hi / 25)
    assert not np.isnan(data["next.reward_vlm"]).any() and np.ptp(data["next.reward_vlm"]) > 0


def test_videos_decode_to_the_stored_frames(exported):
    from storage.dataset import DatasetStore

    store, root = exported
    with DatasetStore.open(store) as st:
        rows = np.concatenate([r[:-1] for _, r in sorted(st.episodes().items())])
        frames = st.read(rows=rows, fields=["frames"])["frames"]
    for j, view in enumerate(VIEWS):
        with av.open(str(root / VIDEO_PATH.format(video_key=f"observation.images.{view}", chunk_index=0,
                                                   file_index=0))) as c:
            decoded = [(float(f.time), f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
        assert len(decoded) == len(rows)
        np.testing.assert_allclose([t for t, _ in decoded], np.arange(len(rows)) / 25, atol=1e-6)
        images = np.stack([img for _, img in decoded])
        assert images.shape == (len(rows), 64, 64, 3)
        err = np.abs(images.astype(np.int16) - frames[:, j]).mean(axis=(1, 2, 3))
        assert err.max() < 8, err  # H.264 at crf 18 in yuv420p: small loss, frames in their place


def test_stats_and_the_reward_against_the_minari_export(exported, tmp_path, monkeypatch):
    import minari

    from pipeline.export.minari_export import export_minari

    store, root = exported
    info = json.loads((root / "meta" / "info.json").read_text())
    stats = json.loads((root / "meta" / "stats.json").read_text())
    assert set(stats) == set(info["features"]) and all(set(s) == STATS for s in stats.values())
    data = pq.read_table(root / DATA_PATH.format(chunk_index=0, file_index=0)).to_pydict()
    state = np.array(data["observation.state"])
    np.testing.assert_allclose(stats["observation.state"]["mean"], state.mean(0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(stats["observation.state"]["std"], state.std(0), rtol=1e-4, atol=1e-6)
    assert stats["index"]["count"] == [info["total_frames"]] and stats["index"]["max"] == [info["total_frames"] - 1]
    img = np.array(stats["observation.images.wide_view"]["mean"])
    assert img.shape == (3, 1, 1) and ((0 <= img) & (img <= 1)).all()
    episodes = _episodes(root)
    assert np.array(episodes[0]["stats/observation.images.close_up/std"]).shape == (3, 1, 1)
    # Minari's rewards are the same shaped VLM reward plus the env's +1 (one shared reader)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    export_minari(store, "lerobot-check", prompts="paper")
    rewards = np.concatenate([ep.rewards for ep in minari.load_dataset("rmtl/lerobot-check-v0").iterate_episodes()])
    np.testing.assert_allclose(np.array(data["next.reward_vlm"]) + np.array(data["next.reward"]), rewards,
                               rtol=1e-6, atol=1e-6)
    assert sum(data["next.reward"]) == sum(data["next.success"]) >= 1


def test_bad_inputs_are_one_line(exported, tmp_path, capsys, monkeypatch):
    from pipeline.export.bc_labels import bc_labels

    store, root = exported
    cases = [(["export", "lerobot", store, "--out", str(root)], ["already exists and is not empty", "--overwrite"])]
    bc = tmp_path / "bc.zarr"
    bc_labels(bc, episodes=1, progress=False)
    cases.append((["export", "lerobot", str(bc), "--out", str(tmp_path / "x")], ["holds no frames", "export minari"]))
    for argv, words in cases:
        assert run(argv) == 2
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(lines) == 1 and all(w in lines[0] for w in words), lines
    monkeypatch.setitem(sys.modules, "av", None)  # PyAV not installed
    assert run(["export", "lerobot", store, "--out", str(tmp_path / "y")]) == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert "needs pyarrow, av (PyAV) and pandas (av is missing)" in line and "pip install 'rmtl[lerobot]'" in line

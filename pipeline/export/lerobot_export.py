"""Export a dataset store as a LeRobot dataset (format v3.0) with VLM rewards.

Written with pyarrow (Parquet) and PyAV (MP4), not with the ``lerobot`` package (whose
releases pin an older torch than this project). The layout, as LeRobot's v3.0 reader
(``LeRobotDatasetMetadata``) expects it; definitions in docs/storage.md:

- ``meta/info.json``: codebase_version, robot_type, fps, totals, the path templates, the
  features (dtype, shape, names; video features with their encoding ``info``), and this
  export's record under ``rmtl`` (source store, the VLM reward's provenance);
- ``meta/stats.json``: min, max, mean, std, count of every feature (images: per channel,
  shape [3, 1, 1], scaled to [0, 1]);
- ``meta/tasks.parquet``: the task string (the pandas index) and its ``task_index``;
- ``meta/episodes/chunk-000/file-000.parquet``: one row per episode: its frames' global
  index range, data and video file indices, each video's from/to timestamps, per-episode
  stats (``stats/<feature>/<stat>``);
- ``data/chunk-000/file-000.parquet``: one row per frame;
- ``videos/observation.images.<view>/chunk-000/file-000.mp4``: each camera's frames, all
  episodes one after another (H.264, yuv420p, ``fps`` frames per second).

Frames: an episode of T env steps (T + 1 store rows) gives T frames, frame t being the
observation before step t + 1 with that step's action, reward and end, as LeRobot records
(observe, act); the terminal observation is no frame. Columns: ``observation.state`` (the
task's state row), ``action``, ``next.reward`` (the env's own reward: +1 on the success
step), ``next.reward_vlm`` (the prompt set's shaped VLM reward, as the Minari export's),
``next.done``, ``next.success``, and LeRobot's ``timestamp``, ``frame_index``,
``episode_index``, ``index``, ``task_index``.

The dataset is written in a staging folder beside ``out`` and swapped in whole; an ``out`` that
is, contains or lies inside the store is refused (pipeline.export.export_target), and ``--overwrite`` replaces
only an earlier LeRobot export of rmtl that holds just what its manifest, ``.rmtl-output.json``, lists (rmtl.outputs).
"""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import tyro

from pipeline.export.export_target import StagedDirectory, interrupted_export, refuse_output_over_inputs
from rmtl.config import Config
from rmtl.errors import ConfigError, StoreError
from rmtl.outputs import check_replaceable, write_manifest
from rmtl.provenance import portable_values
from rmtl.reward.projection import DEFAULT_ALPHA
from rmtl.reward.prompt_sets import PromptSet

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
"""LeRobot's defaults: files per chunk folder, and the size (MB) past which it starts a new file."""
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 500
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS_PATH = "meta/tasks.parquet"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
VCODEC, PIX_FMT = "libx264", "yuv420p"
"""H.264 is among LeRobot's video codecs and decodes everywhere; yuv420p is its pixel format."""
ROBOT_TYPE = "fetch"
TASK_TEXT = {"fetch_lift": "Pick up the cube and lift it off the table."}
"""The task string of each task's episodes (tasks.parquet); other tasks: their name."""
EXTRA = "pip install 'rmtl[lerobot]'"
MAX_STAT_FRAMES = 1000
"""Frames per camera the image stats are computed over (evenly spaced), as LeRobot samples."""


def _libraries() -> tuple[Any, Any, Any, Any]:
    try:
        import av
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ConfigError(f"rmtl export lerobot needs pyarrow, av (PyAV) and pandas ({e.name} is missing); "
                          f"install them with: {EXTRA}") from None
    return av, pd, pa, pq


def _stats(values: np.ndarray) -> dict[str, list]:
    """LeRobot's stats of one feature over frames [N, ...]: min, max, mean, std over axis 0, count."""
    v = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    return {"min": v.min(0).tolist(), "max": v.max(0).tolist(), "mean": v.mean(0).tolist(),
            "std": v.std(0).tolist(), "count": [int(len(v))]}


def _image_stats(frames: np.ndarray) -> dict[str, list]:
    """Per-channel stats of uint8 frames [N, H, W, 3], scaled to [0, 1], shaped [3, 1, 1]."""
    if len(frames) > MAX_STAT_FRAMES:
        frames = frames[np.round(np.linspace(0, len(frames) - 1, MAX_STAT_FRAMES)).astype(int)]
    x = frames.astype(np.float64).transpose(3, 0, 1, 2).reshape(3, -1) / 255.0
    shape = lambda a: a.reshape(3, 1, 1).tolist()  # noqa: E731
    return {"min": shape(x.min(1)), "max": shape(x.max(1)), "mean": shape(x.mean(1)), "std": shape(x.std(1)),
            "count": [int(len(frames))]}


def _merge(stats: list[dict[str, list]]) -> dict[str, list]:
    """Stats of the union of the frames of several stats (pooled mean and variance), as LeRobot aggregates."""
    n = np.array([s["count"][0] for s in stats], dtype=np.float64)
    mean = np.array([s["mean"] for s in stats])
    var = np.array([s["std"] for s in stats]) ** 2
    w = n.reshape(-1, *([1] * (mean.ndim - 1)))
    total = (mean * w).sum(0) / n.sum()
    pooled = ((var + (mean - total) ** 2) * w).sum(0) / n.sum()
    return {"min": np.min([s["min"] for s in stats], axis=0).tolist(),
            "max": np.max([s["max"] for s in stats], axis=0).tolist(),
            "mean": total.tolist(), "std": np.sqrt(pooled).tolist(), "count": [int(n.sum())]}


class _VideoWriter:
    """One camera's MP4: frames of every episode appended in order, pts = global frame index."""

    def __init__(self, av: Any, path: Path, fps: int, height: int, width: int):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.container = av.open(str(path), mode="w")
        self.stream = self.container.add_stream(VCODEC, rate=fps)
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, PIX_FMT
        self.stream.options = {"g": "2", "crf": "18"}  # short GOPs: LeRobot seeks by timestamp
        self.time_base = Fraction(1, fps)
        self.frames = 0
        self._av = av

    def write(self, frames: np.ndarray) -> None:
        for img in frames:
            frame = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts, frame.time_base = self.frames, self.time_base
            self.container.mux(self.stream.encode(frame))
            self.frames += 1

    def close(self) -> None:
        self.container.mux(self.stream.encode(None))
        self.container.close()


def _video_info(av: Any, path: Path) -> dict[str, Any]:
    """LeRobot's ``info`` of a video feature, read back from the written file."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return {"video.height": s.codec_context.height, "video.width": s.codec_context.width,
                "video.codec": s.codec_context.name, "video.pix_fmt": s.codec_context.format.name,
                "video.is_depth_map": False, "video.fps": float(s.average_rate), "video.channels": 3,
                "has_audio": bool(c.streams.audio)}


def default_out(store_path: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<data dir>/lerobot/<store name>``."""
    from rmtl.provenance import data_dir as resolve_data_dir

    name = str(store_path).rstrip("/").rsplit("/", 1)[-1].removesuffix(".zarr") or "store"
    return resolve_data_dir(data_dir) / "lerobot" / name


def export_lerobot(store: Any, out: str | os.PathLike[str] | None = None, prompts: PromptSet | str = "paper",
                   model: str | None = None, alpha: float = DEFAULT_ALPHA, overwrite: bool = False,
                   data_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Write the store's episodes as a LeRobot v3.0 dataset at ``out`` (module docstring);
    returns ``{"path", "episodes", "frames", "cameras", "model_id", "prompt_set"}``."""
    from pipeline.export.episode_rows import read_episodes
    from pipeline.stores.store_rows import open_store
    from rmtl.reward.prompt_sets import load_prompt_set
    from rmtl.tasks import get_task

    av, pd, pa, pq = _libraries()
    pset = prompts if isinstance(prompts, PromptSet) else load_prompt_set(prompts)
    fps = get_task().render_fps  # one env step per frame (the export reads pick-and-lift stores)
    with open_store(store) as st:
        if not st.has_frames:
            raise StoreError(f"{st.path} holds no frames for the LeRobot videos; export it as a Minari dataset "
                             f"(rmtl export minari) or render one with frames (rmtl render-and-embed)")
        h, w = st.resolution
        if h % 2 or w % 2:
            raise StoreError(f"{st.path} has {h} x {w} px frames; H.264 in yuv420p needs even sides, render at "
                             f"an even resolution (--resolution)")
        root = Path(out) if out is not None else default_out(st.path, data_dir)
        refuse_output_over_inputs(root, [st.path])
        StagedDirectory.recover(root)  # what a killed export left: its staging folder, an old dataset set aside
        # --overwrite replaces only an earlier LeRobot export of rmtl holding just what its manifest lists
        existed = check_replaceable(root, "lerobot", overwrite=overwrite)
        # Written beside the target and swapped in whole: a failure or a kill keeps the old dataset; the
        # check runs again right before the swap.
        staged = StagedDirectory(root, check=lambda: check_replaceable(root, "lerobot", overwrite=overwrite))
        try:
            eps = read_episodes(st, "be exported as a LeRobot dataset", pset, model, "vlm", alpha)
            staged.create()
            return _write_dataset(av, pd, pa, pq, st, eps, staged, pset, alpha, h, w, fps)
        except KeyboardInterrupt:
            raise interrupted_export(root, existed, staged.committed) from None
        finally:
            staged.discard()


def _write_dataset(av: Any, pd: Any, pa: Any, pq: Any, st: Any, eps: Any, staged: StagedDirectory,
                   pset: PromptSet, alpha: float, h: int, w: int, fps: int) -> dict[str, Any]:
    """Write the dataset into ``staged.path`` and commit it to its target; returns export_lerobot's record."""
    from pipeline.export.episode_rows import BOUNDS
    from pipeline.stores.store_models import store_task
    from rmtl.reward.shaping import ShapingConfig

    root = staged.path
    views, info, task = st.views, st.info, store_task(st).name
    layout = info.get("layout") or {}
    cams = {v: _VideoWriter(av, root / VIDEO_PATH.format(video_key=f"observation.images.{v}", chunk_index=0,
                                                         file_index=0), fps, h, w) for v in views}
    columns: dict[str, list[np.ndarray]] = {}
    episodes: list[dict[str, Any]] = []
    ep_stats: list[dict[str, dict[str, list]]] = []
    start = 0
    try:
        for i, e in enumerate(eps.ids):
            p = eps.pos[e]
            now, nxt = eps.order[p[:-1]], eps.order[p[1:]]  # observation rows, and the rows their steps ended in
            t = len(now)
            frame = {
                "observation.state": eps.cols["state"][now].astype(np.float32),
                "action": eps.cols["action"][nxt].astype(np.float32),
                "next.reward": eps.env_reward[p[1:]].astype(np.float32),
                "next.reward_vlm": eps.shaped[p[1:]].astype(np.float32),
                "next.done": (eps.cols["terminated"][nxt] | eps.cols["truncated"][nxt]).astype(bool),
                "next.success": eps.cols["terminated"][nxt].astype(bool),
                "timestamp": (np.arange(t) / fps).astype(np.float32),
                "frame_index": np.arange(t, dtype=np.int64),
                "episode_index": np.full(t, i, dtype=np.int64),
                "index": np.arange(start, start + t, dtype=np.int64),
                "task_index": np.zeros(t, dtype=np.int64),
            }
            stats = {k: _stats(v) for k, v in frame.items()}
            for k, v in frame.items():
                columns.setdefault(k, []).append(v)
            meta: dict[str, Any] = {"episode_index": i, "tasks": [TASK_TEXT.get(task, task)], "length": t,
                                    "data/chunk_index": 0, "data/file_index": 0, "dataset_from_index": start,
                                    "dataset_to_index": start + t}
            frames = st.read(rows=now, fields=["frames"])["frames"]  # [T, V, H, W, 3], one episode at a time
            for j, v in enumerate(views):
                key = f"observation.images.{v}"
                cams[v].write(frames[:, j])
                stats[key] = _image_stats(frames[:, j])
                meta.update({f"videos/{key}/chunk_index": 0, f"videos/{key}/file_index": 0,
                             f"videos/{key}/from_timestamp": start / fps,
                             f"videos/{key}/to_timestamp": (start + t) / fps})
            meta.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
                         "rmtl/store_episode": e, "rmtl/difficulty": float(eps.cols["difficulty"][now[0]])})
            meta.update({f"stats/{k}/{s}": val for k, st_ in stats.items() for s, val in st_.items()})
            episodes.append(meta)
            ep_stats.append(stats)
            start += t
    finally:
        for cam in cams.values():
            cam.close()

    data = {k: np.concatenate(v) for k, v in columns.items()}
    vectors = {"observation.state": data["observation.state"].shape[1], "action": data["action"].shape[1]}
    arrays = {k: (pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), vectors[k]) if k in vectors
                  else pa.array(v)) for k, v in data.items()}
    _write_parquet(pq, pa.table(arrays), root / DATA_PATH.format(chunk_index=0, file_index=0))
    _write_parquet(pq, pa.Table.from_pylist(episodes), root / EPISODES_PATH.format(chunk_index=0, file_index=0))
    tasks = pd.DataFrame({"task_index": [0]}, index=[TASK_TEXT.get(task, task)])  # LeRobot: task strings index
    (root / TASKS_PATH).parent.mkdir(parents=True, exist_ok=True)
    tasks.to_parquet(root / TASKS_PATH)

    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [vectors["observation.state"]],
                              "names": layout.get("state_fields")},
        "action": {"dtype": "float32", "shape": [vectors["action"]], "names": layout.get("action_fields")},
    }
    for v in views:
        key = f"observation.images.{v}"
        features[key] = {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"],
                         "info": _video_info(av, cams[v].path)}
    for k in ("next.reward", "next.reward_vlm", "next.done", "next.success", "timestamp", "frame_index",
              "episode_index", "index", "task_index"):
        features[k] = {"dtype": str(data[k].dtype), "shape": [1], "names": None}
    n_eps, n_frames = len(episodes), int(start)
    doc = {
        "codebase_version": CODEBASE_VERSION, "robot_type": ROBOT_TYPE, "total_episodes": n_eps,
        "total_frames": n_frames, "total_tasks": 1, "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": DATA_FILES_SIZE_IN_MB, "video_files_size_in_mb": VIDEO_FILES_SIZE_IN_MB,
        "fps": fps, "splits": {"train": f"0:{n_eps}"}, "data_path": DATA_PATH, "video_path": VIDEO_PATH,
        "features": features,
        "rmtl": {
            "store": eps.path, "store_uuid": info.get("uuid"), "task": task, "store_episodes": eps.ids,
            "reward_vlm": {"column": "next.reward_vlm", "model_id": eps.model_id, "prompt_set_id": pset.id,
                           "prompt_set": pset.name, "alpha": float(alpha), "bounds": BOUNDS,
                           "shaping": ShapingConfig().model_dump(mode="json"),
                           "what": "shaped reward of the active micro-task's view-mean goal-baseline score "
                                   "(rule phase), without the env's +1"},
            "env_reward": {"column": "next.reward", "what": "the env's reward: +1 on the success step, else 0"},
        },
    }
    (root / INFO_PATH).write_text(json.dumps(portable_values(doc), indent=4))
    keys = [k for k in features if k in ep_stats[0]]
    (root / STATS_PATH).write_text(json.dumps({k: _merge([s[k] for s in ep_stats]) for k in keys}, indent=4))
    write_manifest(root, "lerobot", store=portable_values(eps.path))  # what --overwrite may replace later
    staged.commit()
    return {"path": str(staged.target), "episodes": n_eps, "frames": n_frames, "cameras": len(views),
            "model_id": eps.model_id, "prompt_set": pset.to_dict()}


def _write_parquet(pq: Any, table: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="snappy")


class ExportLeRobotConfig(Config):
    """``rmtl export lerobot STORE``: a store's episodes and frames as a LeRobot v3.0 dataset."""

    store: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="STORE")]
    """Dataset store with frames (schema v2: with actions) and image embeddings."""
    prompts: str = "paper"
    """Prompt set of the VLM reward column: a YAML file or a shipped set's name."""
    out: str | None = None
    """Dataset directory (default <data-dir>/lerobot/<store name>)."""
    model: str | None = None
    """Stored model id or spec (default: the store's only model, else the default model rmtl-fetch-tiny when stored)."""
    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""
    overwrite: bool = False
    """Replace a non-empty --out directory."""
    data_dir: str | None = None
    """Data directory (default $RMTL_DATA_DIR or ./data)."""


def run(cfg: ExportLeRobotConfig) -> dict[str, Any]:
    """The LeRobot export a config describes (:func:`export_lerobot`)."""
    return export_lerobot(cfg.store, cfg.out, prompts=cfg.prompts, model=cfg.model, alpha=cfg.alpha,
                          overwrite=cfg.overwrite, data_dir=cfg.data_dir)

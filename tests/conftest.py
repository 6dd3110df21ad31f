"""Shared fixtures. Importing rmtl first selects EGL offscreen rendering."""

from __future__ import annotations

import os

import pytest

import rmtl  # noqa: F401

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a model hub


def command_env(tmp) -> dict[str, str]:
    """The environment of a command a test runs as a subprocess: its data (and Minari datasets)
    under ``tmp``, offscreen rendering, no model hub, no Prefect server or debug tracebacks."""
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "HF_HUB_OFFLINE": "1",
           "RMTL_DATA_DIR": str(tmp / "data"), "MINARI_DATASETS_PATH": str(tmp / "minari")}
    env.pop("PREFECT_API_URL", None)
    env.pop("RMTL_DEBUG", None)
    return env


@pytest.fixture(scope="session")
def small_env():
    """One pick-and-lift env rendering 2 views at 64 px (session-wide: building it costs ~1 s)."""
    from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv

    env = FetchPickAndLiftEnv(views=("wide_view", "close_up"), resolution=64)
    yield env
    env.close()


@pytest.fixture(scope="module")
def random_tiny_vlm():
    """``rmtl-fetch-tiny@random``, loaded once per module: the reward model of the trainer
    tests (loading it sets torch's thread count, restored afterwards)."""
    import torch

    from rmtl.vlm import load_vlm

    threads = torch.get_num_threads()
    torch.manual_seed(0)
    yield load_vlm("rmtl-fetch-tiny@random")
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_dense_run(tmp_path_factory):
    """A dense-reward Stage-1 run at smoke size (no rendering): 128 env steps of 2 envs x
    16-step episodes, checkpoints every 32 steps, 2-episode evaluations every 16 steps."""
    from rmtl.train.config import stage1_config
    from rmtl.train.stage1 import train_stage1

    cfg = stage1_config(
        "dense_reference", n_envs=2, n_steps=16, batch_size=16, n_epochs=2, total_timesteps=128,
        checkpoint_every=32, eval_every=16, eval_episodes=2, progress_bar=False, torch_threads=1, vec_env="dummy",
        output_dir=str(tmp_path_factory.mktemp("dense") / "run"), env={"max_episode_steps": 16},
    )
    return train_stage1(cfg)


def as_schema_v1(path) -> None:
    """Turn a store into what schema v1 wrote: no action / episode-end arrays, version 1."""
    import warnings

    import zarr

    g = zarr.open_group(str(path), mode="r+", use_consolidated=False)
    for name in ("action", "terminated", "truncated"):
        del g[name]
    g.attrs["rmtl_schema"] = {"name": "rmtl.dataset", "version": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))


PROCESS_TAG_VAR = "RMTL_TEST_PROCESS_TAG"
"""Environment variable a test sets on the servers and workers it starts, so it can find them all."""


def _kill_tagged(tag: str) -> list[int]:
    """Kill every process whose environment carries ``tag`` (only a test's own have it); their pids."""
    import psutil

    killed = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(PROCESS_TAG_VAR) == tag:
                p.kill()
                killed.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return killed


@pytest.fixture
def kill_tagged():
    """``kill_tagged(tag) -> pids``: stop what a test started and tagged, and say what was left running."""
    return _kill_tagged

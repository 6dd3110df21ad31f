"""Shared fixtures. Importing rmtl first selects EGL offscreen rendering."""

from __future__ import annotations

import os

import pytest

import rmtl  # noqa: F401

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a model hub


def rmtl_command(tmp, *args: object, timeout: float = 600):
    """``python -m rmtl ARGS`` as a user runs it (:func:`command_env`), from the repository root."""
    import subprocess
    import sys
    from pathlib import Path

    return subprocess.run([sys.executable, "-m", "rmtl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=command_env(Path(tmp)), cwd=Path(__file__).resolve().parent.parent)


def refusal_line(r) -> str:
    """The first line of a refused command: status 2, an ``error:`` line, no traceback."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    assert lines and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines[0]


def command_env(tmp) -> dict[str, str]:
    """The environment of a command a test runs as a subprocess: its data (and Minari datasets)
    under ``tmp``, offscreen rendering, no model hub, no Prefect server or debug tracebacks."""
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "HF_HUB_OFFLINE": "1",
           "RMTL_DATA_DIR": str(tmp / "data"), "MINARI_DATASETS_PATH": str(tmp / "minari")}
    env.pop("PREFECT_API_URL", None)
    env.pop("RMTL_DEBUG", None)
    return env


def reward_stack(n_envs: int, reward, env_config, *, seed: int | None = 0, kind=None, **build):
    """Training's own env stack (rmtl.train.envs.train_env.build_train_env) at test size: ``n_envs``
    dummy sub-envs of pick-and-lift with ``env_config``, the reward of ``reward`` (or the ``kind``
    given, e.g. one with a test scorer), no phase one-hot; ``build`` goes to build_train_env
    (``vlm``, ``source``, ``phase_selector``). Seeded like PPO seeds it. Returns the TrainEnv."""
    from rmtl.tasks import get_task
    from rmtl.train.config import EnvStackConfig
    from rmtl.train.envs.train_env import build_train_env

    stack = EnvStackConfig(env=env_config, reward=reward, n_envs=n_envs, vec_env="dummy", phase_input=False)
    env = build_train_env(stack, get_task(), kind=kind, **build)
    if seed is not None:
        env.venv.seed(seed)
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


# -- one tiny store for the session ---------------------------------------------------------
TINY_STORE = {"episodes": 2, "views": ["wide_view", "close_up"], "resolution": 64}
"""The session's tiny store: 2 expert episodes of 2 views at 64 px, embedded with the default model."""


def files_digest(folder) -> dict[str, str]:
    """Every file under ``folder`` and its SHA-256 (what a test checks was left as it was)."""
    import hashlib
    from pathlib import Path

    folder = Path(folder)
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_store(store, where):
    """Copy ``store`` and what sits beside it under its name (``<name>.cache``, ``<name>.runs``, ...)
    into the folder ``where``; returns the copy's path (same name)."""
    import shutil
    from pathlib import Path

    store, where = Path(store), Path(where)
    where.mkdir(parents=True, exist_ok=True)
    for p in sorted(store.parent.glob(f"{store.name}*")):
        if p.is_dir():
            shutil.copytree(p, where / p.name)
        else:
            shutil.copy2(p, where / p.name)
    return where / store.name


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory):
    """One tiny store for the whole session (``TINY_STORE``), made by ``render_and_embed`` as the
    main job makes one: frames, embeddings of the default model ``rmtl-fetch-tiny``, its FAISS cache
    (``s.zarr.cache``) and run record beside it. Shared: tests only read it (checked at the end of the
    session); a test that damages, appends to or embeds into a store takes ``tiny_store_copy``."""
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, render_and_embed

    path = tmp_path_factory.mktemp("tiny_store") / "s.zarr"
    render_and_embed(RenderAndEmbedConfig.make(store=str(path), **TINY_STORE), progress=False)
    before = files_digest(path)
    yield path
    assert files_digest(path) == before, f"a test wrote into the shared tiny store {path}; give it tiny_store_copy"


@pytest.fixture
def tiny_store_copy(tiny_store, tmp_path):
    """This test's own copy of the session's tiny store (with its cache), to damage or write into."""
    return copy_store(tiny_store, tmp_path / "tiny_copy")


# -- one Prefect server for the session -----------------------------------------------------
@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """One real Prefect server for every test that runs flows through an API: ``prefect server
    start`` as users start it (``flows.server.LocalServer``, as ``rmtl server start`` does), its
    PREFECT_HOME inside a temporary data dir, analytics off. Started by the first test that asks.

    Tests that share it never assume it is empty: each uses its own work pool, deployment name and
    run folders (flow runs are tagged with them), and gives its clients their own PREFECT_HOME
    (:func:`prefect_client_env`). Tests of the server's own life (start, stop, kill, a lost server)
    start private ones."""
    import uuid

    from flows.server import LocalServer

    tmp = tmp_path_factory.mktemp("prefect_server")
    tag = uuid.uuid4().hex
    server = LocalServer(home=tmp / "data" / "prefect", log_file=tmp / "server.log",
                         extra_env={PROCESS_TAG_VAR: tag, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    try:
        server.start(timeout=240)
        yield server
    finally:
        server.stop()
        left = _kill_tagged(tag)
    assert not left, f"processes of the session's Prefect server left running: {left}"


def prefect_client_env(server, home, base=None, **extra: str) -> dict[str, str]:
    """Environment of a process that uses the session's server ``server``: its API URL, this test's
    own PREFECT_HOME ``home``, the project's Prefect settings, then ``extra`` (never the server's tag)."""
    from flows.prefect_settings import client_env

    env = client_env(server.url, home, base)
    env.update(extra)
    return env

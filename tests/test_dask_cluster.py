"""Integration: ``rmtl render-and-embed --dask-address`` against a real ``distributed``
scheduler and worker, each its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from flows.process_group import kill_group

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
from conftest import PROCESS_TAG_VAR as TAG_VAR  # noqa: E402


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _wait_for(what: str, check, timeout: float, logs: list[Path]) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    tails = "".join(f"\n--- {p}\n{p.read_text(errors='replace')[-1500:]}" for p in logs if p.exists())
    raise AssertionError(f"timed out waiting for {what}{tails}")


def test_render_and_embed_on_a_dask_scheduler_and_worker(tmp_path, kill_tagged):
    from storage.dataset import DatasetStore

    tag = uuid.uuid4().hex
    env = {**os.environ, TAG_VAR: tag, "MUJOCO_GL": "egl", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "RMTL_DATA_DIR": str(tmp_path / "data"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    info = tmp_path / "scheduler.json"
    slog, wlog = tmp_path / "scheduler.log", tmp_path / "worker.log"
    procs = []
    try:
        procs.append(_start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                             "--no-dashboard", "--scheduler-file", str(info)], env, slog))
        address = _wait_for("the scheduler file", lambda: info.is_file() and json.loads(info.read_text() or "{}")
                            .get("address"), 120, [slog])
        assert str(address).startswith("tcp://127.0.0.1:")
        procs.append(_start([sys.executable, "-m", "distributed.cli.dask_worker", str(address), "--nworkers", "1",
                             "--nthreads", "1", "--no-dashboard", "--name", "w0"], env, wlog))
        _wait_for("the worker to register", lambda: "Registered to" in wlog.read_text(errors="replace")
                  if wlog.exists() else False, 120, [slog, wlog])
        store = tmp_path / "stores" / "dask.zarr"
        run = subprocess.run([sys.executable, "-m", "rmtl", "render-and-embed", "--dask-address", str(address),
                              "--episodes", "2", "--views", "wide_view", "--resolution", "64", "--model",
                              "rmtl-fetch-tiny@random", "--batch-size", "32", "--store", str(store)],
                             env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:], wlog.read_text(errors="replace")[-2000:])
        with DatasetStore.open(store) as ds:
            assert sorted(ds.episodes()) == [0, 1]
            assert list(ds.views) == ["wide_view"] and ds.resolution == (64, 64)
            assert ds.embedded_rows("rmtl-fetch-tiny__random") == ds.num_rows > 0
        # the episodes were rendered by this scheduler's worker, not by a local cluster
        from distributed import Client

        with Client(str(address), timeout=30) as client:
            computed = client.run_on_scheduler(lambda dask_scheduler: {
                name: float(prefix.all_durations.get("compute", 0.0))
                for name, prefix in dask_scheduler.task_prefixes.items()})
        assert computed.get("rollout_episodes", 0) > 0, computed  # compute seconds the worker reported
    finally:
        for p in reversed(procs):
            kill_group(p, timeout=10)
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running after shutdown: {leftovers}"

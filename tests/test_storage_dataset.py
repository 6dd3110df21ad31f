"""Dataset store: round trip, commit semantics, SIGKILL resumption, writer lock, bad stores."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest
import zarr

from rmtl.errors import StoreError
from rmtl.tasks.fetch_lift.layout import store_description
from rmtl.tasks.fetch_lift.state import KEY_SPEC
from storage import DatasetStore, SCHEMA_VERSION
from storage.testing import synthetic_embeddings, synthetic_rows

VIEWS = ["wide_view", "close_up"]


def make(path, **kw) -> DatasetStore:
    return DatasetStore.create(path, **store_description(), views=VIEWS, resolution=8, provenance={"policy": "test"}, seeds=[1, 2], visual_domain=True, **kw)


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_round_trip(tmp_path):
    path = tmp_path / "d.zarr"
    with make(path) as s:
        assert s.num_rows == 0
        assert s.append(synthetic_rows(0, 7)) == range(0, 7)
        assert s.append(synthetic_rows(7, 13)) == range(7, 20)
        s.add_embeddings("hf-hub:org/model", 0, synthetic_embeddings(0, 12), meta={"image_size": 224})
        s.set_text_embeddings("hf-hub:org/model", {"baseline": np.ones(4), "grasp": np.arange(4)})
        s.set_text_embeddings("hf-hub:org/model", {"approach": np.zeros(4)})
    r = DatasetStore.open(path)
    ref = synthetic_rows(0, 20)
    assert r.num_rows == 20 and r.views == VIEWS and r.resolution == (8, 8) and r.has_frames
    info = r.info
    assert info["provenance"] == {"policy": "test"} and info["seeds"] == [1, 2] and info["visual_domain"] is True
    assert info["key_spec"]["rotation_scale"] == pytest.approx(0.035) and len(r.uuid) == 32
    everything = r.read()
    assert "frames" not in everything
    for k in ("state", "episode", "step", "phase_rule", "success"):
        np.testing.assert_array_equal(everything[k], ref[k])
    assert everything["key"].shape == (20, 11)
    some = r.read([5, 2, 5, -1], fields=["frames", "state"], views=["close_up"])
    assert some["frames"].shape == (4, 1, 8, 8, 3)
    np.testing.assert_array_equal(some["frames"][:, 0, 0, 0, 0], [6, 3, 6, 20])
    np.testing.assert_array_equal(r.read(slice(3, 6), ["state"])["state"][:, 0], [4, 5, 6])
    assert r.read(4, ["step"])["step"] == 4
    eps = r.episodes()
    assert sorted(eps) == [0, 1] and eps[1].tolist() == list(range(10, 20))
    m = "hf-hub:org/model"
    assert r.model_ids() == [m] and r.embedded_rows(m) == 12 and r.embedded_rows("other") == 0
    assert r.embedding_info(m)["meta"] == {"image_size": 224} and r.embedding_info(m)["embed_dim"] == 4
    emb = r.embeddings(m, [11, 0], views=["close_up"])
    assert emb.dtype == np.float16 and emb.shape == (2, 1, 4)
    np.testing.assert_array_equal(emb[:, 0, 0], [12, 1])
    with pytest.raises(IndexError):
        r.embeddings(m, [12])  # rows 12.. have no embeddings yet
    assert list(r.text_embeddings(m)) == ["baseline", "grasp", "approach"]
    np.testing.assert_array_equal(r.text_embeddings(m)["grasp"], np.arange(4))
    assert r.text_models() == [m]
    with pytest.raises(StoreError, match="read-only"):
        r.append(synthetic_rows(20, 1))


def test_commit_semantics_and_embedding_order(tmp_path):
    path = tmp_path / "d.zarr"
    w = make(path, frames=False)
    w.append(synthetic_rows(0, 5, frames=False))
    r = DatasetStore.open(path)
    w.append(synthetic_rows(5, 5, frames=False))
    assert r.num_rows == 5  # a reader sees what was committed when it (re)loaded
    r.refresh()
    assert r.num_rows == 10
    with pytest.raises(StoreError, match="only 10 rows are committed"):
        w.add_embeddings("m", 0, synthetic_embeddings(0, 11))
    w.add_embeddings("m", 0, synthetic_embeddings(0, 4))
    with pytest.raises(StoreError, match="committed up to row 4; add rows from 4"):
        w.add_embeddings("m", 2, synthetic_embeddings(2, 2))
    with pytest.raises(StoreError, match="add rows from 4, not 10"):  # rows+embeddings need the model up to date
        w.append(synthetic_rows(10, 2, frames=False), embeddings={"m": synthetic_embeddings(10, 2)})
    w.add_embeddings("m", 4, synthetic_embeddings(4, 6))
    w.append(synthetic_rows(10, 2, frames=False), embeddings={"m": synthetic_embeddings(10, 2)})
    assert w.num_rows == 12 and w.embedded_rows("m") == 12
    with pytest.raises(StoreError, match="missing fields"):
        w.append({"state": np.zeros((1, 25), np.float32)})
    with pytest.raises(StoreError, match="this store has no frames"):
        w.append(synthetic_rows(12, 1))
    bad = synthetic_rows(12, 1, frames=False)
    bad["success"] = np.array([0.5])
    with pytest.raises(StoreError, match="'success' has dtype float64"):
        w.append(bad)
    w.close()


# The child appends batches of BATCH rows until TOTAL; with STOP_AT it writes batch STOP_AT's
# data and then blocks before committing it (so the kill lands between data and commit).
CHILD = textwrap.dedent("""
    import sys, time
    from rmtl.tasks.fetch_lift.state import KEY_SPEC
    from storage import DatasetStore
    from storage.testing import synthetic_rows
    path, total, batch, stop_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    s = DatasetStore.open(path, mode="a", key_spec=KEY_SPEC)
    if stop_at >= 0:
        real_commit = s._commit
        def commit(rows, emb):
            if rows > stop_at * batch:
                print("MIDWAY", flush=True)
                time.sleep(600)
            real_commit(rows, emb)
        s._commit = commit
    print("OPEN", flush=True)
    while s.num_rows < total:
        s.append(synthetic_rows(s.num_rows, min(batch, total - s.num_rows)))
        print("COMMITTED", s.num_rows, flush=True)
    print("DONE", flush=True)
""")


@pytest.fixture
def child(tmp_path):
    """Start append-loop children; any still running at the end are killed."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    procs = []

    def start(path, total, batch, stop_at):
        p = subprocess.Popen([sys.executable, str(script), str(path), str(total), str(batch), str(stop_at)],
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _wait_for(p, word: str) -> str:
    for line in p.stdout:
        if line.startswith(word):
            return line
    raise AssertionError(f"child exited (rc {p.wait()}) before printing {word}")


def _check_rows(path) -> int:
    s = DatasetStore.open(path)
    n = s.num_rows
    cols = s.read(fields=["state", "frames", "episode"])
    np.testing.assert_array_equal(cols["state"][:, 0], np.arange(1, n + 1))  # no zero rows, no duplicates
    np.testing.assert_array_equal(cols["frames"][:, :, 0, 0, 0], ((np.arange(n) % 250) + 1)[:, None].repeat(2, 1))
    np.testing.assert_array_equal(cols["episode"], np.arange(n) // 10)
    return n


@pytest.mark.slow
def test_sigkill_mid_append_then_resume(tmp_path, child):
    path = tmp_path / "d.zarr"
    make(path).close()
    total, batch = 120, 9

    # 1. killed between writing a batch's data and committing it
    p = child(path, total, batch, stop_at=3)
    _wait_for(p, "MIDWAY")
    p.send_signal(signal.SIGKILL)
    p.wait()
    g = zarr.open_group(str(path), mode="r", use_consolidated=False)
    assert g["state"].shape[0] == 4 * batch  # the killed batch's rows are on disk ...
    assert _check_rows(path) == 3 * batch  # ... but not visible

    # 2. killed at an arbitrary moment of a running append loop
    p = child(path, 10_000, batch, stop_at=-1)
    while int(_wait_for(p, "COMMITTED").split()[1]) < 6 * batch:
        pass
    time.sleep(0.02)  # an append takes ~10-50 ms: land inside the next one
    p.send_signal(signal.SIGKILL)
    p.wait()
    n = _check_rows(path)
    assert n >= 6 * batch
    print(f"killed after {n} committed rows; arrays hold "
          f"{zarr.open_group(str(path), mode='r', use_consolidated=False)['state'].shape[0]}")

    # 3. a resumed writer (taking over the dead writer's lock) ends with exactly `total` rows
    p = child(path, max(total, n + 2 * batch), batch, stop_at=-1)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0 and "DONE" in out
    assert _check_rows(path) == max(total, n + 2 * batch)


def test_writer_lock(tmp_path):
    path = tmp_path / "d.zarr"
    w = make(path)
    with pytest.raises(StoreError) as e:
        DatasetStore.open(path, mode="a")
    msg = one_line(e)
    assert f"locked by writer pid {os.getpid()} on host {socket.gethostname()}" in msg
    assert f"delete {path}.lock" in msg and "break_lock=True" in msg
    DatasetStore.open(path).close()  # readers are never blocked
    w.close()
    assert not os.path.exists(f"{path}.lock")

    # a lock left by a dead process on this host is taken over
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = {"pid": dead.pid, "host": socket.gethostname(), "since": time.time(), "heartbeat": time.time(), "token": "x"}
    (tmp_path / "d.zarr.lock").write_text(json.dumps(lock))
    w = DatasetStore.open(path, mode="a", key_spec=KEY_SPEC)
    w.append(synthetic_rows(0, 2))
    # ... and a writer whose lock was taken from it stops instead of writing on
    (tmp_path / "d.zarr.lock").write_text(json.dumps({**lock, "pid": os.getpid(), "token": "other"}))
    with pytest.raises(StoreError, match="lost the lock"):
        w.append(synthetic_rows(2, 2))
    assert DatasetStore.open(path).num_rows == 2
    w.close()

    # a lock on another host counts while its heartbeat is fresh, not after the TTL
    other = {**lock, "host": "elsewhere", "pid": 1, "heartbeat": time.time() - 100}
    (tmp_path / "d.zarr.lock").write_text(json.dumps(other))
    with pytest.raises(StoreError, match="on host elsewhere"):
        DatasetStore.open(path, mode="a")
    DatasetStore.open(path, mode="a", lock_ttl_s=50).close()
    (tmp_path / "d.zarr.lock").write_text(json.dumps(other))
    DatasetStore.open(path, mode="a", break_lock=True).close()


def test_bad_stores_fail_with_one_line(tmp_path):
    with pytest.raises(StoreError) as e:
        DatasetStore.open(tmp_path / "nothing.zarr")
    assert "no dataset store at" in one_line(e)

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("hi")
    with pytest.raises(StoreError) as e:
        DatasetStore.open(foreign, mode="a")
    assert "is not a dataset store (no zarr.json in it)" in one_line(e)
    assert not (tmp_path / "foreign.lock").exists()

    plain = tmp_path / "plain.zarr"
    zarr.open_group(str(plain), mode="w").create_array("x", shape=(3,), dtype="i4")
    with pytest.raises(StoreError) as e:
        DatasetStore.open(plain)
    assert "not an rmtl dataset store" in one_line(e)

    path = tmp_path / "d.zarr"
    make(path).close()
    with pytest.raises(StoreError) as e:
        make(path)
    assert "already exists" in one_line(e)
    make(path, overwrite=True).close()

    def edit(fn):
        g = zarr.open_group(str(path), mode="r+", use_consolidated=True)
        fn(g.attrs)

    edit(lambda a: a.update({"rmtl_schema": {"name": "rmtl.dataset", "version": SCHEMA_VERSION + 1}}))
    with pytest.raises(StoreError) as e:
        DatasetStore.open(path)
    assert f"has dataset schema v{SCHEMA_VERSION + 1}, newer than this rmtl reads (v{SCHEMA_VERSION}); upgrade rmtl" in one_line(e)
    edit(lambda a: a.update({"rmtl_schema": {"name": "rmtl.dataset", "version": SCHEMA_VERSION}}))

    edit(lambda a: a.update({"rmtl_commit": {"rows": 5, "embeddings": {}}}))
    with pytest.raises(StoreError) as e:
        DatasetStore.open(path)
    assert "is corrupt: 5 rows are committed but array 'state' holds 0" in one_line(e)

    edit(lambda a: a.update({"rmtl_commit": {"rows": 0, "embeddings": {"m": 3}}}))
    with pytest.raises(StoreError) as e:
        DatasetStore.open(path)
    assert "embeddings of model 'm' are committed but array" in one_line(e)

    edit(lambda a: a.pop("rmtl_commit"))
    with pytest.raises(StoreError) as e:
        DatasetStore.open(path)
    assert "is incomplete: its creation never committed" in one_line(e)

    make(path, overwrite=True).close()
    import shutil

    shutil.rmtree(path / "step")
    for mode in ("r", "a"):
        with pytest.raises(StoreError) as e:
            DatasetStore.open(path, mode=mode)
        assert "is corrupt: missing arrays step" in one_line(e)


def test_fsspec_url(tmp_path):
    url = f"memory://rmtl-test-{uuid.uuid4().hex}/d.zarr"
    with DatasetStore.create(url, **store_description(), views=VIEWS, resolution=8) as s:
        s.append(synthetic_rows(0, 5))
        with pytest.raises(StoreError, match="locked by writer"):
            DatasetStore.open(url, mode="a")
    r = DatasetStore.open(url)
    assert r.num_rows == 5 and r.path == url
    np.testing.assert_array_equal(r.read(fields=["state"])["state"][:, 0], np.arange(1, 6))

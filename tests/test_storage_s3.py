"""Stores behind s3:// URLs, against a real S3 server (moto's, on 127.0.0.1): render and
embed into a new store, append to it, verify it (and find damage done to it there), query
it; and the one line a user gets when the S3 backend is not installed (docs/storage.md)."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys

import pytest

from rmtl.cli import run

pytestmark = pytest.mark.slow
STORE = "s3://rmtl-test/stores/s.zarr"
RENDER = ["render-and-embed", "--store", STORE, "--views", "wide_view", "--resolution", "64"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on a free local port, found by s3fs through the standard AWS
    environment variables (as a user points rmtl at MinIO or any S3-compatible endpoint);
    yields an s3fs filesystem on it with the bucket made."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
                     "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_EC2_METADATA_DISABLED": "true"}.items():
            mp.setenv(k, v)
        import fsspec

        fs = fsspec.filesystem("s3", use_listings_cache=False, skip_instance_cache=True)
        fs.mkdir("rmtl-test")
        yield fs
    server.stop()


def _ok(argv: list[str], capsys) -> str:
    rc = run(argv)
    out, err = capsys.readouterr()
    assert rc == 0, (argv, err[-3000:])
    return out


def test_write_append_verify_and_query_a_store_on_s3(s3, tmp_path, monkeypatch, capsys):
    from storage.dataset import DatasetStore

    monkeypatch.chdir(tmp_path)  # nothing may land in a local folder named after the URL
    monkeypatch.setenv("RMTL_DATA_DIR", str(tmp_path / "data"))
    out = _ok([*RENDER, "--episodes", "1"], capsys)
    assert f"{STORE}.cache/" in out  # the state cache lives next to the store, on S3
    with DatasetStore.open(STORE) as st:
        first = len(st)
        assert st.location.url == STORE and set(st.episodes()) == {0}
    assert s3.exists("rmtl-test/stores/s.zarr/zarr.json") and s3.exists("rmtl-test/stores/s.zarr/state/c/0/0")
    assert s3.find("rmtl-test/stores/s.zarr.cache") and not s3.exists("rmtl-test/stores/s.zarr.lock")

    _ok([*RENDER, "--episodes", "2"], capsys)  # resumes: appends episode 1
    with DatasetStore.open(STORE) as st:
        assert set(st.episodes()) == {0, 1} and len(st) > first
        assert st.embedded_rows(st.model_ids()[0]) == len(st)
        state = st.read(fields=["state"])["state"]

    out = _ok(["store", "verify", STORE], capsys)
    assert "checksummed; no damaged" in out
    query = _ok(["query", "--store", STORE], capsys)
    result = tmp_path / "data" / "remote" / "s3" / "rmtl-test" / "stores" / "s.zarr.analysis" / "queries" / "queries.json"
    answers = json.loads(result.read_text())
    assert "queries.json" in query and answers["store"] == STORE and answers["store_rows"] == len(state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]

    chunk = "rmtl-test/stores/s.zarr/state/c/0/0"  # damage done on the server is found there
    raw = bytearray(s3.cat_file(chunk))
    raw[len(raw) // 2] ^= 0xFF
    s3.pipe_file(chunk, bytes(raw))
    assert run(["store", "verify", STORE]) == 2
    out, err = capsys.readouterr()
    assert "DAMAGED state chunk 0.0 rows 0-" in out and "checksum mismatch" in out
    assert err.count("\n") == 1 and f"store {STORE} has 1 damaged part(s)" in err


@pytest.mark.parametrize("argv", [["store", "verify", STORE], ["query", "--store", STORE],
                                  [*RENDER, "--episodes", "1"]])
def test_without_the_s3_backend_one_line_names_the_extra(argv, tmp_path):
    """A Python without s3fs (simulated: its import fails), as after `pip install rmtl`."""
    code = "import sys; sys.modules['s3fs'] = None; from rmtl.cli import main; main()"
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert lines[0] == (f"error: store address {STORE} needs the S3 backend (s3fs), which is not installed; "
                        f"install it with: pip install 'rmtl[cloud]'")
    assert not any(tmp_path.iterdir())

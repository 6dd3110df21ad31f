"""Committed results and docs hold no machine's absolute paths, and records write portable ones."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from rmtl.provenance import (DATA_DIR_ENV, expand_data_dir, portable_command, portable_path, portable_values,
                             recorded_path, source_root)

REPO = Path(__file__).resolve().parent.parent
# Roots of other machines' checkouts, data folders, scratch and home directories.
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:work|tmp|root|home|Users)/")


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "results", "docs"], cwd=REPO, capture_output=True,
                             check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout")
    files = []
    for name in filter(None, out.decode().split("\0")):
        p = REPO / name
        if p.is_file():
            data = p.read_bytes()
            if b"\0" not in data:  # binary (zips, arrays, images): their paths are not ours to rewrite
                files.append(p)
    return files


def test_committed_text_files_hold_no_machine_paths():
    hits = []
    for p in tracked_text_files():
        for no, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                hits.append(f"{p.relative_to(REPO)}:{no}: {line.strip()[:160]}")
    assert not hits, ("absolute paths of a machine in committed files (write them repository-relative, "
                      "as $RMTL_DATA_DIR/..., or $TMPDIR/...):\n" + "\n".join(hits))


def test_portable_path_round_trip(tmp_path, monkeypatch):
    data = tmp_path / "data"
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    root = source_root()
    assert root == REPO
    assert portable_path(REPO / "results" / "x" / "run") == "results/x/run"
    assert portable_path(REPO) == "."
    assert portable_path(data / "stores" / "a.zarr") == f"${DATA_DIR_ENV}/stores/a.zarr"
    assert portable_path(data) == f"${DATA_DIR_ENV}"
    outside = tmp_path / "elsewhere" / "b.zarr"
    assert portable_path(outside) == str(outside)
    assert portable_path("s3://bucket/c.zarr") == "s3://bucket/c.zarr"
    for p in (REPO / "results" / "x", data / "stores" / "a.zarr", outside):
        assert recorded_path(portable_path(p)) == p
    assert recorded_path("/old/absolute/record") == Path("/old/absolute/record")  # older records
    assert expand_data_dir(f"${DATA_DIR_ENV}/runs/r", tmp_path / "other") == tmp_path / "other" / "runs" / "r"


def test_a_data_dir_inside_the_repository_wins(monkeypatch):
    # the default ./data lies in the checkout: the nearer root names it
    monkeypatch.setenv(DATA_DIR_ENV, str(REPO / "data"))
    assert portable_path(REPO / "data" / "runs" / "r") == f"${DATA_DIR_ENV}/runs/r"
    assert portable_path(REPO / "results" / "r") == "results/r"


def test_commands_and_configs_are_recorded_portably(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    argv = [str(REPO / "rmtl" / "cli.py"), "--out", str(tmp_path / "o"), f"--store={tmp_path}/s.zarr", "-n", "3"]
    assert portable_command(argv) == ["rmtl/cli.py", "--out", f"${DATA_DIR_ENV}/o", f"--store=${DATA_DIR_ENV}/s.zarr",
                                      "-n", "3"]
    config = {"output_dir": str(REPO / "results" / "r"), "stores": [str(tmp_path / "a")], "model": "rmtl-fetch-tiny",
              "n": 2, "note": None}
    assert json.loads(json.dumps(portable_values(config))) == {
        "output_dir": "results/r", "stores": [f"${DATA_DIR_ENV}/a"], "model": "rmtl-fetch-tiny", "n": 2, "note": None}


def test_run_dir_reads_a_data_dir_relative_output_dir(tmp_path, monkeypatch):
    from rmtl.train.config import Stage1Config

    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    cfg = Stage1Config.make(output_dir=f"${DATA_DIR_ENV}/runs/stage1/rmtl_s1")
    assert cfg.run_dir() == tmp_path / "runs" / "stage1" / "rmtl_s1"
    assert cfg.run_dir(tmp_path / "other") == tmp_path / "other" / "runs" / "stage1" / "rmtl_s1"


def test_committed_stage2_worker_record_resolves_in_this_checkout():
    # report.py loads the Stage-1 worker named in a Stage-2 checkpoint's meta.json
    meta = REPO / "results" / "oracle_structure" / "stage2" / "manager_s0" / "final" / "meta.json"
    if not meta.is_file():
        pytest.skip("no committed Stage-2 run")
    worker = json.loads(meta.read_text())["worker"]
    assert not Path(worker).is_absolute()
    assert recorded_path(worker).exists()

"""The rmtl command as users run it (subprocesses), including one-line errors."""

import subprocess
import sys

import pytest
from PIL import Image


def rmtl(*args, env_extra=None, timeout=300):
    import os

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "rmtl.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_env_preview_writes_labelled_png(tmp_path):
    out = tmp_path / "p.png"
    r = rmtl("env", "preview", "--difficulty", "0.2", "--resolution", "64", "--no-shadows", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stdout
    img = Image.open(out)
    assert img.size == (3 * 64, 2 * (64 + 18))


@pytest.mark.parametrize("args, message", [
    (["env", "preview", "--difficulty", "2"], "difficulty 2.0 is outside [0, 1]"),
    (["env", "preview", "--resolution", "5000"], "resolution 5000 is out of range"),
    (["env", "preview", "--views", "top"], "unknown camera view 'top'"),
    (["render-and-embed", "--model", "no-such-model", "--episodes", "1"], "unknown model 'no-such-model'"),
    (["render-and-embed", "--stages", "0,x"], "stages must be comma-separated integers"),
    (["query", "--store", "/nonexistent/store.zarr"], "no dataset store at /nonexistent/store.zarr"),
])
def test_bad_input_is_one_line_error(args, message):
    r = rmtl(*args)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("error: ")
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_render_and_embed_command_prints_summary_and_paths(tmp_path):
    store = tmp_path / "s.zarr"
    r = rmtl("render-and-embed", "--episodes", "2", "--views", "wide_view,close_up", "--resolution", "64",
             "--store", str(store), "--data-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "reward quality" in r.stdout and "approach" in r.stdout
    assert f"  {store}" in r.stdout and ".faiss" in r.stdout
    assert store.is_dir()


def test_bc_labels_command(tmp_path):
    r = rmtl("bc-labels", "--out", str(tmp_path / "bc.zarr"), "--episodes", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "rule-phase labels: approach" in r.stdout and "BCLabelsResult(" not in r.stdout


def test_reward_quality_compares_two_stored_models(tiny_store_copy, tmp_path):
    from pipeline.jobs.embed import embed_store

    store = str(tiny_store_copy)  # 2 episodes, 2 views, 64 px, embedded by the default model
    embed_store(store, "rmtl-fetch-tiny@random", progress=False)
    out = tmp_path / "gates.json"
    r = rmtl("reward-quality", "--store", store, "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "right_prompt_accuracy" in r.stdout and ("PASS" in r.stdout or "FAIL" in r.stdout)
    import json

    data = json.loads(out.read_text())
    assert set(data["gates"]) >= {"approach_spearman", "grasp_auc", "approach_spread_10x_random"}

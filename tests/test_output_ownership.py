"""An output never replaces or writes into what is not its own (docs/errors.md,
"What an output may replace"): ``--overwrite`` of an export replaces only an earlier export of the same
kind that rmtl wrote (its ``.rmtl-output.json``); a model or a run is never written into a store, a
cache, an export, a model or a run of another kind. Every case runs the real command, ``python -m
rmtl``, as a subprocess and asserts its one error line (status 2) and that nothing was touched."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import files_digest as digest, refusal_line as error_line, rmtl_command

pytestmark = pytest.mark.slow  # each test runs real commands as subprocesses, one trains a reward model

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "rmtl" / "vlm" / "weights" / "rmtl-fetch-tiny"


def rmtl(tmp: Path, *args: object) -> subprocess.CompletedProcess:
    return rmtl_command(tmp, *args, timeout=300)


@pytest.fixture
def store(tiny_store):
    """The session's tiny store with frames and embeddings (2 episodes, 64 px), and its FAISS cache;
    every command here must leave it as it was."""
    assert tiny_store.name == "s.zarr" and tiny_store.with_name("s.zarr.cache").is_dir()
    return tiny_store


def _stage1_run(d: Path) -> Path:
    """A Stage-1 run directory as `rmtl train stage1` leaves one (config, logs, a checkpoint)."""
    ck = d / "checkpoints" / "step_000000064"
    ck.mkdir(parents=True)
    (d / "config.yaml").write_text("variant: rmtl\nseed: 0\n")
    (d / "eval.csv").write_text("timesteps,episodes,successes,success_rate,ci_low,ci_high\n")
    (ck / "meta.json").write_text(json.dumps({"num_timesteps": 64}))
    (d / "checkpoints" / "latest.txt").write_text(ck.name)
    return d


# ------------------------------------------------------------------ item 9: --overwrite of exports
def test_overwrite_never_deletes_what_is_not_an_earlier_export(store, tmp_path):
    other = tmp_path / "other.zarr"
    shutil.copytree(store, other)
    folder = tmp_path / "folder"
    shutil.copytree(store, folder / "s.zarr")
    (folder / "notes.txt").write_text("a user's notes")
    run = _stage1_run(tmp_path / "run")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("a user's notes")
    cache = store.with_name("s.zarr.cache")
    cases = [(other, "is a dataset store"),
             (folder, "is a folder of other files (notes.txt, s.zarr/) (it holds the dataset store"),
             (run, "is a Stage-1 run"),
             (cache, f"is the FAISS cache of the dataset store {store}"),
             (plain, "is a folder of other files (notes.txt)")]
    before = {p: digest(p) for p, _ in cases}
    for out, what in cases:
        line = error_line(rmtl(tmp_path, "export", "lerobot", store, "--out", out, "--overwrite"))
        assert line.startswith(f"error: --out {out} {what}"), line
        assert "not a LeRobot dataset exported by rmtl" in line and "choose another --out" in line, line
        # without --overwrite the line names what is there too, and does not suggest --overwrite
        line = error_line(rmtl(tmp_path, "export", "lerobot", store, "--out", out))
        assert what in line and "pass --overwrite" not in line, line
    assert {p: digest(p) for p, _ in cases} == before


def test_minari_overwrite_never_deletes_a_store_where_the_dataset_would_go(store, tmp_path):
    target = tmp_path / "minari" / "rmtl" / "N-v0"
    shutil.copytree(store, target)
    before = digest(target)
    line = error_line(rmtl(tmp_path, "export", "minari", store, "--name", "N", "--overwrite"))
    assert line.startswith(f"error: Minari dataset rmtl/N-v0 at {target} is a dataset store, not a Minari dataset "
                           f"exported by rmtl"), line
    assert digest(target) == before


def test_overwrite_replaces_an_earlier_export_of_its_own_kind_only(store, tmp_path):
    out = tmp_path / "lr"
    r = rmtl(tmp_path, "export", "lerobot", store, "--out", out)
    assert r.returncode == 0, r.stderr[-3000:]
    marker = json.loads((out / ".rmtl-output.json").read_text())
    assert marker["kind"] == "lerobot"
    line = error_line(rmtl(tmp_path, "export", "lerobot", store, "--out", out))
    assert "already exists and is not empty (a LeRobot dataset exported by rmtl)" in line and "--overwrite" in line
    r = rmtl(tmp_path, "export", "lerobot", store, "--out", out, "--overwrite")
    assert r.returncode == 0, r.stderr[-3000:]
    # a LeRobot export is not a Minari dataset: --overwrite of the other kind refuses it
    minari_target = tmp_path / "minari" / "rmtl" / "lr-v0"
    shutil.copytree(out, minari_target)
    line = error_line(rmtl(tmp_path, "export", "minari", store, "--name", "lr", "--overwrite"))
    assert "is a LeRobot dataset exported by rmtl, not a Minari dataset exported by rmtl" in line, line


# ------------------------------------------------------------ item 10: outputs written into others'
def test_train_reward_vlm_refuses_a_model_a_store_and_a_run_of_another_kind(store, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(TINY, model)
    run = _stage1_run(tmp_path / "run")
    for out, what in [(model, "is a reward model"), (store, "is a dataset store"), (run, "is a Stage-1 run"),
                      (store.with_name("s.zarr.cache"), "is the FAISS cache of the dataset store")]:
        before = digest(out)
        line = error_line(rmtl(tmp_path, "train-reward-vlm", "--store", store, "--out", out, "--steps", 2))
        assert line.startswith(f"error: --out {out} {what}") and "a reward model is never written into it" in line, line
        assert digest(out) == before


def test_train_stage1_refuses_a_store_and_fresh_moves_nothing(store, tmp_path):
    before = digest(store)
    for extra in ([], ["--fresh"]):
        line = error_line(rmtl(tmp_path, "train", "stage1", "--out", store, "--steps", 64, *extra))
        assert f"output_dir {store} is a dataset store; a Stage-1 run is never written into it" in line, line
    assert digest(store) == before and not list(store.glob("previous-*"))
    model = tmp_path / "model"
    shutil.copytree(TINY, model)
    line = error_line(rmtl(tmp_path, "train", "stage1", "--out", model, "--steps", 64, "--fresh"))
    assert "is a reward model (its weights and open_clip_config.json); a Stage-1 run is never written into it" in line, line
    line = error_line(rmtl(tmp_path, "train", "stage1", "--out", store.with_name("s.zarr.cache"), "--steps", 64))
    assert "is the FAISS cache of the dataset store" in line, line


def test_a_vlm_run_resumes_with_its_settings_and_its_card_is_never_rewritten(store, tmp_path):
    """A finished run rerun with its settings trains nothing and rewrites nothing; with other settings
    it is refused; with more steps it resumes (the weights are retrained, so the card is rewritten)."""
    out = tmp_path / "vlm"

    def cmd(steps: int = 2) -> list[object]:
        return ["train-reward-vlm", "--store", store, "--out", out, "--steps", steps, "--batch-size", 8,
                "--warmup-steps", 0, "--eval-every", 2, "--checkpoint-every", 2, "--holdout-fraction", 0.5,
                "--device", "cpu", "--caption-eval-samples", 8]

    args = cmd()
    r = rmtl(tmp_path, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    kept = digest(out)
    r = rmtl(tmp_path, *args)
    assert r.returncode == 0 and "nothing to train and nothing rewritten" in r.stdout, r.stdout + r.stderr[-2000:]
    assert digest(out) == kept
    line = error_line(rmtl(tmp_path, *args, "--lr", 0.002))
    assert line.startswith(f"error: --out {out} holds a train-reward-vlm run with other settings (lr 0.001 there, "
                           f"0.002 here)"), line
    assert digest(out) == kept
    r = rmtl(tmp_path, *cmd(steps=4))  # more steps: trains on from step 2
    assert r.returncode == 0 and "resumed from" in r.stdout, r.stdout + r.stderr[-2000:]
    assert json.loads((out / "metrics.json").read_text())["steps_done"] == 4
    assert json.loads((out / "run.json").read_text())["config"]["steps"] == 4

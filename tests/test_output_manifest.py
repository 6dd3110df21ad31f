"""A command replaces only what it wrote, and knows what it wrote from its manifest (docs/errors.md,
"What an output may replace"): an export records every file it wrote (path, size, time, SHA-256) in
``.rmtl-output.json``; ``--overwrite`` refuses a folder holding anything else (at any depth) or a
listed file that changed; ``--fresh`` moves only a run's own files; a report, a qualification report
and a sweep's output never go into a store, a run, a cache or an export. Every case runs the real
command, ``python -m rmtl``, as a subprocess, asserts its first line and status, and that nothing was
lost."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import files_digest as digest, refusal_line as error_line, rmtl_command

pytestmark = pytest.mark.slow  # each test runs real commands as subprocesses (exports, one trains)

ROOT = Path(__file__).resolve().parent.parent
MARKER = ".rmtl-output.json"


def rmtl(tmp: Path, *args: object) -> subprocess.CompletedProcess:
    return rmtl_command(tmp, *args, timeout=600)


@pytest.fixture(scope="module")
def exports(tiny_store, tmp_path_factory):
    """A LeRobot and a Minari export of the session's tiny store, written by the commands; tests copy them."""
    d = tmp_path_factory.mktemp("manifest_exports")
    lr = d / "lr"
    r = rmtl(d, "export", "lerobot", tiny_store, "--out", lr)
    assert r.returncode == 0, r.stderr[-3000:]
    r = rmtl(d, "export", "minari", tiny_store, "--name", "m")
    assert r.returncode == 0, r.stderr[-3000:]
    return {"lerobot": lr, "minari": d / "minari" / "rmtl" / "m-v0"}


def _copy(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest)  # bytes and modification times kept: still the export its manifest describes
    return dest


def test_the_manifest_lists_every_file_the_export_wrote(exports):
    for kind, root in exports.items():
        manifest = json.loads((root / MARKER).read_text())
        assert manifest["kind"] == kind and manifest["written_by"] == f"rmtl export {kind}"
        assert manifest["command"].startswith(f"rmtl export {kind} ") and manifest["manifest"] == 1
        on_disk = {k: v for k, v in digest(root).items() if k != MARKER}
        assert {k: v["sha256"] for k, v in manifest["files"].items()} == on_disk
        assert all(v["size"] == (root / k).stat().st_size for k, v in manifest["files"].items())


# --------------------------------------------------------- case 1: a marker copied into a user's folder
def test_a_users_folder_with_a_copied_manifest_is_not_deleted(tiny_store, exports, tmp_path):
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("a user's notes")
    (mine / "sub" / "data.csv").write_text("1,2,3\n")
    shutil.copy(exports["lerobot"] / MARKER, mine / MARKER)
    before = digest(mine)
    line = error_line(rmtl(tmp_path, "export", "lerobot", tiny_store, "--out", mine, "--overwrite"))
    assert line.startswith(f"error: --out {mine} holds {mine / 'notes.txt'}, which the LeRobot dataset export "
                           f"there did not write (its manifest, {MARKER}, does not list it)"), line
    assert "choose another --out" in line and "pass --overwrite" not in line, line
    assert digest(mine) == before
    # a marker of an export written before manifests (kind only): the files of an export's layout only
    (mine / MARKER).write_text(json.dumps({"kind": "lerobot", "written_by": "rmtl export lerobot"}))
    before = digest(mine)
    line = error_line(rmtl(tmp_path, "export", "lerobot", tiny_store, "--out", mine, "--overwrite"))
    assert line.startswith(f"error: --out {mine} holds {mine / 'notes.txt'}, which is no part of a LeRobot "
                           f"dataset export"), line
    assert digest(mine) == before


# ---------------------------------------------- case 2: a file added to an export, a listed file changed
def test_an_export_holding_a_users_file_or_a_changed_file_is_refused(tiny_store, exports, tmp_path):
    out = _copy(exports["lerobot"], tmp_path / "lr")
    added = out / "meta" / "my_notes.md"
    added.write_text("the user's notes on this dataset")
    before = digest(out)
    for extra in (["--overwrite"], []):
        line = error_line(rmtl(tmp_path, "export", "lerobot", tiny_store, "--out", out, *extra))
        assert line.startswith(f"error: --out {out} holds {added}, which the LeRobot dataset export there did "
                               f"not write"), line
        assert "--overwrite deletes only what an export wrote" in line and "pass --overwrite" not in line, line
    assert digest(out) == before
    added.unlink()
    stats = out / "meta" / "stats.json"
    stats.write_text(stats.read_text() + " ")  # a user edited a file the export wrote
    before = digest(out)
    line = error_line(rmtl(tmp_path, "export", "lerobot", tiny_store, "--out", out, "--overwrite"))
    assert line.startswith(f"error: --out {out} holds {stats}, changed since the LeRobot dataset export there "
                           f"wrote it ("), line
    assert digest(out) == before
    # a copy with new modification times but the same bytes is still the export: replaced
    again = tmp_path / "copied"
    shutil.copytree(exports["lerobot"], again, copy_function=shutil.copy)
    r = rmtl(tmp_path, "export", "lerobot", tiny_store, "--out", again, "--overwrite")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((again / MARKER).read_text())["files"].keys() == {k for k in digest(again) if k != MARKER}


# ------------------------------------------------------------ case 3: a store deeper than three levels
def test_a_store_at_any_depth_in_an_export_is_refused(tiny_store, exports, tmp_path):
    out = _copy(exports["lerobot"], tmp_path / "lr")
    deep = out / "videos" / "a" / "b" / "c" / "s.zarr"  # a store four folders down
    shutil.copytree(tiny_store, deep)
    before = digest(out)
    line = error_line(rmtl(tmp_path, "export", "lerobot", tiny_store, "--out", out, "--overwrite"))
    assert line.startswith(f"error: --out {out} is a LeRobot dataset exported by rmtl that now also holds a dataset "
                           f"store at {deep}; --overwrite would delete it"), line
    assert digest(out) == before
    # a run deep inside is refused the same way
    shutil.rmtree(out / "videos" / "a")
    run = out / "data" / "x" / "y" / "z" / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "eval.csv").write_text("timesteps\n")
    line = error_line(rmtl(tmp_path, "export", "lerobot", tiny_store, "--out", out, "--overwrite"))
    assert f"that now also holds a Stage-1 run at {run}" in line, line
    assert (run / "eval.csv").read_text() == "timesteps\n"


# --------------------------------------------------------------------------- case 4: the same for Minari
def test_minari_overwrite_replaces_only_what_its_manifest_lists(tiny_store, exports, tmp_path):
    target = _copy(exports["minari"], tmp_path / "minari" / "rmtl" / "m-v0")
    ds = "error: Minari dataset rmtl/m-v0 at"
    added = target / "data" / "notes.txt"
    added.write_text("a user's notes")
    before = digest(target)
    line = error_line(rmtl(tmp_path, "export", "minari", tiny_store, "--name", "m", "--overwrite"))
    assert line.startswith(f"{ds} {target} holds {added}, which the Minari dataset export there did not write"), line
    assert "choose another --name" in line, line
    assert digest(target) == before
    added.unlink()
    deep = target / "data" / "a" / "b" / "c" / "s.zarr"
    shutil.copytree(tiny_store, deep)
    before = digest(target)
    line = error_line(rmtl(tmp_path, "export", "minari", tiny_store, "--name", "m", "--overwrite"))
    assert line.startswith(f"{ds} {target} is a Minari dataset exported by rmtl that now also holds a dataset store "
                           f"at {deep}"), line
    assert digest(target) == before
    # a user's folder where a dataset would go, with the manifest copied in
    mine = tmp_path / "minari" / "rmtl" / "u-v0"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "mine.hdf5").write_bytes(b"a user's data")
    shutil.copy(exports["minari"] / MARKER, mine / MARKER)
    before = digest(mine)
    line = error_line(rmtl(tmp_path, "export", "minari", tiny_store, "--name", "u", "--overwrite"))
    assert line.startswith(f"error: Minari dataset rmtl/u-v0 at {mine} holds {mine / 'data' / 'mine.hdf5'}, "
                           f"which the Minari dataset export there did not write"), line
    assert digest(mine) == before
    # untouched, it is replaced
    shutil.rmtree(deep.parents[2])
    r = rmtl(tmp_path, "export", "minari", tiny_store, "--name", "m", "--overwrite")
    assert r.returncode == 0, r.stderr[-3000:]


# ------------------------------------------------------- case 5: --fresh moves only the run's own files
TRAIN = ["train", "stage1", "--variant", "dense_reference", "--steps", "32", "--no-progress",
         "--set", "n_envs=2", "--set", "n_steps=16", "--set", "batch_size=16", "--set", "n_epochs=1",
         "--set", "eval_episodes=1", "--set", "env.max_episode_steps=16", "--set", "checkpoint_every=32",
         "--set", "eval_every=32", "--set", "vec_env=dummy", "--set", "torch_threads=1"]


def test_fresh_leaves_a_users_store_and_files_in_place(tiny_store, tmp_path):
    folder = tmp_path / "folder"
    shutil.copytree(tiny_store, folder / "s.zarr")
    (folder / "notes.txt").write_text("a user's notes")
    (folder / "mine").mkdir()
    (folder / "mine" / "keep.txt").write_text("keep me")
    theirs = {n: digest(folder / n) if (folder / n).is_dir() else (folder / n).read_text()
              for n in ("s.zarr", "notes.txt", "mine")}
    r = rmtl(tmp_path, *TRAIN, "--out", folder)
    assert r.returncode == 0, r.stderr[-3000:]
    run_files = {p.name for p in folder.iterdir()} - set(theirs)
    assert {"config.yaml", "run.json", "eval.csv", "checkpoints"} <= run_files, run_files
    r = rmtl(tmp_path, *TRAIN, "--out", folder, "--fresh")
    assert r.returncode == 0, r.stderr[-3000:]
    (previous,) = [p for p in folder.iterdir() if p.name.startswith("previous-")]
    assert {p.name for p in previous.iterdir()} == run_files  # the run's own files, and nothing else
    assert (f"the earlier run's files moved to {previous}; left in place, not the run's: mine/, notes.txt, "
            f"s.zarr/") in r.stdout, r.stdout
    assert {n: digest(folder / n) if (folder / n).is_dir() else (folder / n).read_text() for n in theirs} == theirs
    assert json.loads((folder / "summary.json").read_text())["env_steps"] == 32


# ----------------------------------- case 6: report, qualify and a sweep never write into what is not theirs
def _stage1_run(d: Path) -> Path:
    (d / "checkpoints").mkdir(parents=True)
    (d / "config.yaml").write_text("variant: rmtl\nseed: 0\n")
    (d / "eval.csv").write_text("timesteps,episodes,successes,success_rate,ci_low,ci_high\n")
    return d


def test_report_qualify_and_sweep_outputs_are_refused_in_what_is_not_theirs(tiny_store, exports, tmp_path):
    run = _stage1_run(tmp_path / "run")
    export = _copy(exports["lerobot"], tmp_path / "lr")
    cache = tiny_store.with_name("s.zarr.cache")
    cases = [(tiny_store, "is a dataset store;"), (run, "is a Stage-1 run;"),
             (cache, f"is the FAISS cache of the dataset store {tiny_store};"),
             (export, "is a LeRobot dataset exported by rmtl;"),
             (export / "report", f"lies inside a LeRobot dataset exported by rmtl ({export});"),
             (cache / "report", f"lies inside the FAISS cache of the dataset store {tiny_store};")]
    watched = [tiny_store, cache, run, export]
    before = {p: digest(p) for p in watched}
    for out, what in cases:
        line = error_line(rmtl(tmp_path, "report", run, "--out", out))
        assert line.startswith(f"error: --out {out} {what}"), line
        assert ("a report is never written into it" in line or "nothing is written into it" in line) and \
            "choose another --out" in line, line
        line = error_line(rmtl(tmp_path, "qualify", "--out", out))
        assert line.startswith(f"error: --out {out} {what}"), line
        sweep = tmp_path / f"sweep_{out.name}.yaml"
        sweep.write_text(f"output_root: {out}\nsteps: 32\nruns:\n  - variants: [dense_reference]\n    seeds: [0]\n")
        line = error_line(rmtl(tmp_path, "sweep", sweep, "--dry-run"))
        assert line.startswith(f"error: sweep file {sweep}: output_root {out} {what}"), line
        assert "give another output_root" in line, line
    assert {p: digest(p) for p in watched} == before
    assert not (export / "report").exists() and not (cache / "report").exists()

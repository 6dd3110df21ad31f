"""No command loses data: exports never write over the store they read and swap a new dataset in
only once it is whole (a SIGKILL leaves the old one or none, a rerun works); a run directory that
holds a run is resumed or refused, and ``--fresh`` moves the earlier run aside (docs/errors.md,
"What is never deleted"). Every case runs the real command, ``python -m rmtl``, as a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test runs real commands as subprocesses (exports, training) and kills them

ROOT = Path(__file__).resolve().parent.parent
VIEWS = ["wide_view", "close_up"]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "HF_HUB_OFFLINE": "1",
           "RMTL_DATA_DIR": str(tmp / "data"), "MINARI_DATASETS_PATH": str(tmp / "minari"), **extra}
    env.pop("PREFECT_API_URL", None)
    return env


def rmtl(tmp: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rmtl", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=_env(tmp, **extra), cwd=ROOT)


def error_line(r: subprocess.CompletedProcess, code: int = 2) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, r.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines[0]


def digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and its SHA-256."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def store_verifies(tmp: Path, store: Path) -> bool:
    r = rmtl(tmp, "store", "verify", store)
    return r.returncode == 0 and "no damage" in r.stdout


@pytest.fixture
def store(tiny_store):
    """The session's tiny store with frames (2 episodes, 2 views, 64 px, embedded with the default
    model); read only: every test works on its own copy (_copy_store)."""
    from conftest import TINY_STORE

    assert TINY_STORE["views"] == VIEWS and TINY_STORE["episodes"] == 2
    return tiny_store


def _copy_store(store: Path, where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    dest = where / store.name
    shutil.copytree(store, dest)
    return dest


def _lerobot_loads(root: Path) -> int:
    """Frames of the LeRobot dataset at ``root``, read as LeRobot's reader does (info, data, videos)."""
    import pyarrow.parquet as pq

    info = json.loads((root / "meta" / "info.json").read_text())
    table = pq.read_table(root / info["data_path"].format(chunk_index=0, file_index=0))
    assert table.num_rows == info["total_frames"] > 0
    for view in VIEWS:
        assert (root / info["video_path"].format(video_key=f"observation.images.{view}", chunk_index=0,
                                                 file_index=0)).is_file()
    return table.num_rows


# ----------------------------------------------------------------- output over the input
def test_an_export_into_over_or_around_its_store_is_refused(store, tmp_path):
    src = _copy_store(store, tmp_path / "folder")
    (tmp_path / "folder" / "notes.txt").write_text("keep me")
    before = digest(tmp_path / "folder")
    for out, how in [(src, "is the input store"), (src.parent, "contains the input store"),
                     (src / "state", "lies inside the input store")]:
        line = error_line(rmtl(tmp_path, "export", "lerobot", src, "--out", out, "--overwrite"))
        assert f"--out {out}" in line and how in line and "choose an output path outside" in line, line
    # Minari: its datasets root inside the store; a dataset folder that holds the store
    line = error_line(rmtl(tmp_path, "export", "minari", src, "--name", "x", "--overwrite",
                           MINARI_DATASETS_PATH=str(src)))
    assert "lies inside the input store" in line, line
    nested = _copy_store(store, tmp_path / "minari" / "rmtl" / "keep-v0")
    line = error_line(rmtl(tmp_path, "export", "minari", nested, "--name", "keep", "--overwrite"))
    assert "contains the input store" in line, line
    assert digest(tmp_path / "folder") == before and store_verifies(tmp_path, src) and store_verifies(tmp_path, nested)


# ------------------------------------------------------------------- kills and Ctrl-C
def _start(tmp: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rmtl", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(tmp), cwd=ROOT,
                            # a suite started in the background by a shell inherits SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _stop_when_staging_appears(p: subprocess.Popen, staging: Path, sig: int) -> tuple[str, str]:
    """Send ``sig`` to ``p`` as soon as its staging folder exists (polled every millisecond)."""
    deadline = time.time() + 240
    try:
        while not staging.exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.001)
        assert p.poll() is None, f"the export ended before it could be stopped: {p.communicate()[1][-2000:]}"
        p.send_signal(sig)
        return p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()


def test_a_killed_lerobot_export_leaves_no_dataset_and_a_rerun_works(store, tmp_path):
    src = _copy_store(store, tmp_path)
    out = tmp_path / "out" / "ds"
    p = _start(tmp_path, "export", "lerobot", src, "--out", out)
    _stop_when_staging_appears(p, out.parent / f".ds.staging-{p.pid}", signal.SIGKILL)
    assert p.returncode == -signal.SIGKILL
    assert not out.exists()  # nothing under the target's name until the export is whole
    assert store_verifies(tmp_path, src)
    r = rmtl(tmp_path, "export", "lerobot", src, "--out", out)  # no --overwrite needed: nothing was there
    assert r.returncode == 0, r.stderr[-3000:]
    assert _lerobot_loads(out) > 0 and sorted(os.listdir(out.parent)) == ["ds"]  # the dead staging folder removed


def test_a_killed_overwrite_keeps_the_old_dataset(store, tmp_path):
    src = _copy_store(store, tmp_path)
    out = tmp_path / "out" / "ds"
    assert rmtl(tmp_path, "export", "lerobot", src, "--out", out).returncode == 0
    old = digest(out)
    old_file = (out / "meta" / "info.json").stat().st_ino  # the new export's is another file (written beside it)
    p = _start(tmp_path, "export", "lerobot", src, "--out", out, "--overwrite")
    _stop_when_staging_appears(p, out.parent / f".ds.staging-{p.pid}", signal.SIGKILL)
    assert p.returncode == -signal.SIGKILL and digest(out) == old
    assert (out / "meta" / "info.json").stat().st_ino == old_file
    assert store_verifies(tmp_path, src)
    r = rmtl(tmp_path, "export", "lerobot", src, "--out", out, "--overwrite")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "meta" / "info.json").stat().st_ino != old_file and _lerobot_loads(out) > 0
    assert sorted(os.listdir(out.parent)) == ["ds"]


def test_ctrl_c_during_an_overwrite_says_the_old_dataset_is_kept(store, tmp_path):
    src = _copy_store(store, tmp_path)
    out = tmp_path / "out" / "ds"
    assert rmtl(tmp_path, "export", "lerobot", src, "--out", out).returncode == 0
    old = digest(out)
    p = _start(tmp_path, "export", "lerobot", src, "--out", out, "--overwrite")
    _, err = _stop_when_staging_appears(p, out.parent / f".ds.staging-{p.pid}", signal.SIGINT)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 130 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error: interrupted") and f"the earlier dataset at {out} is kept unchanged" in lines[0]
    assert "run the same command again to export from the start" in lines[0] and "resume" not in lines[0]
    assert digest(out) == old and sorted(os.listdir(out.parent)) == ["ds"]  # the staging folder removed


def test_a_killed_minari_export_leaves_nothing_minari_trips_on(store, tmp_path):
    import minari

    src = _copy_store(store, tmp_path)
    datasets = tmp_path / "minari"
    p = _start(tmp_path, "export", "minari", src, "--name", "k")
    _stop_when_staging_appears(p, datasets / "rmtl" / f".k-v0.staging-{p.pid}", signal.SIGKILL)
    assert p.returncode == -signal.SIGKILL
    assert not (datasets / "rmtl" / "k-v0").exists() and store_verifies(tmp_path, src)
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(datasets)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a half dataset would be listed as "misconfigured"
            assert "rmtl/k-v0" not in minari.list_local_datasets()
        r = rmtl(tmp_path, "export", "minari", src, "--name", "k")
        assert r.returncode == 0, r.stderr[-3000:]
        ds = minari.load_dataset("rmtl/k-v0")
        assert ds.total_episodes == 2
        assert sorted(os.listdir(datasets / "rmtl")) == ["k-v0"]  # the dead staging folder removed
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


# --------------------------------------------------------------------- training runs
TRAIN = ["train", "stage1", "--variant", "dense_reference", "--steps", "64", "--no-progress",
         "--set", "n_envs=2", "--set", "n_steps=16", "--set", "batch_size=16", "--set", "n_epochs=1",
         "--set", "eval_episodes=1", "--set", "env.max_episode_steps=16", "--set", "keep_results=true",
         "--set", "checkpoint_every=32", "--set", "eval_every=32", "--set", "validation_episodes=1",
         "--set", "test_episodes=1", "--set", "vec_env=dummy", "--set", "torch_threads=1"]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A kept dense run (64 steps, a checkpoint every 32) as it looks when stopped at step 32 on a
    machine without its checkpoints: logs, best/, and resume/ holding the step-32 checkpoint."""
    d = tmp_path_factory.mktemp("data_loss_run")
    run = d / "run"
    r = rmtl(d, *TRAIN, "--out", run)
    assert r.returncode == 0, r.stderr[-3000:]
    shutil.copytree(run / "checkpoints" / "step_000000032", run / "resume")
    shutil.rmtree(run / "checkpoints")
    return run


def _damage(resume: Path, how: str) -> None:
    if how == "no model.zip":
        (resume / "model.zip").unlink()
    elif how == "empty resume/":
        shutil.rmtree(resume)
        resume.mkdir()
    elif how == "model.zip not a zip":
        (resume / "model.zip").write_bytes(b"not a zip file")
    elif how == "meta.json cut short":
        (resume / "meta.json").write_text((resume / "meta.json").read_text()[:20])
    elif how == "curriculum.json not JSON":
        (resume / "curriculum.json").write_text("{stage: 1")


DAMAGE = {"no model.zip": "resume/model.zip is missing", "empty resume/": "resume/model.zip",
          "model.zip not a zip": "resume/model.zip is not a readable zip",
          "meta.json cut short": "resume/meta.json is not valid JSON",
          "curriculum.json not JSON": "resume/curriculum.json is not valid JSON"}


def test_a_run_with_a_broken_resume_state_is_refused_in_one_line_and_left_as_it_was(stopped_run, tmp_path):
    for how, words in DAMAGE.items():
        run = tmp_path / how.replace(" ", "_").replace("/", "")
        shutil.copytree(stopped_run, run)
        _damage(run / "resume", how)
        before = digest(run)
        line = error_line(rmtl(tmp_path, *TRAIN, "--out", run))
        assert words in line and "--fresh" in line and str(run) in line, (how, line)
        assert digest(run) == before, how  # progress_000000000.csv, curriculum.csv, config.yaml, ... untouched
    # whole, it resumes from step 32
    run = tmp_path / "whole"
    shutil.copytree(stopped_run, run)
    r = rmtl(tmp_path, *TRAIN, "--out", run)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run / "run_resume_000000032.json").is_file() and "64 env steps" in r.stdout


def test_fresh_moves_the_earlier_run_aside_and_never_touches_its_logs(stopped_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    (run / "resume" / "model.zip").unlink()
    before = digest(run)
    r = rmtl(tmp_path, *TRAIN, "--out", run, "--fresh")
    assert r.returncode == 0, r.stderr[-3000:]
    (previous,) = [p for p in run.iterdir() if p.name.startswith("previous-")]
    assert f"the earlier run's files moved to {previous}" in r.stdout
    assert digest(previous) == before  # every earlier file, byte for byte
    new_rows = (run / "curriculum.csv").read_text().splitlines()
    old_rows = (previous / "curriculum.csv").read_text().splitlines()
    assert new_rows[0] == old_rows[0] and len(new_rows) == len(old_rows)  # the same 64 steps, not appended
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 64
    # a second --fresh keeps the first previous-* folder and adds another
    r = rmtl(tmp_path, *TRAIN, "--out", run, "--fresh")
    assert r.returncode == 0, r.stderr[-3000:]
    assert len([p for p in run.iterdir() if p.name.startswith("previous-")]) == 2 and digest(previous) == before


def _popen(tmp: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rmtl", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(tmp), cwd=ROOT, start_new_session=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if path.exists():
            return True
        time.sleep(0.02)
    return path.exists()


def test_a_killed_resume_keeps_the_earlier_logs_and_resumes_again(stopped_run, tmp_path):
    """SIGKILL while the resumed session starts and while it trains, SIGINT while it trains: each
    time the first session's logs stay byte for byte, and the next rerun resumes and finishes."""
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    # The first session's own records (config.yaml is rewritten with the run's new folder, best/ by a
    # better checkpoint: neither is the earlier session's log).
    earlier = {name: sha for name, sha in digest(run).items() if name in ("progress_000000000.csv", "run.json")}
    marker = run / "run_resume_000000032.json"  # written once the resumed session has restored its state
    for sig, when in ((signal.SIGKILL, 1.0), (signal.SIGKILL, "restored"), (signal.SIGINT, "restored")):
        proc = _popen(tmp_path, *TRAIN, "--out", run)
        if when == "restored":
            _wait_for(marker, proc)
        else:
            time.sleep(when)
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        proc.communicate(timeout=120)
        assert {k: v for k, v in digest(run).items() if k in earlier} == earlier, (sig, when)
        if proc.returncode == 0:  # it finished before the signal landed: start again from step 32
            shutil.rmtree(run)
            shutil.copytree(stopped_run, run)
    r = rmtl(tmp_path, *TRAIN, "--out", run)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 64
    assert {k: v for k, v in digest(run).items() if k in earlier} == earlier

"""Bad inputs as a new user gives them: every command ends with exactly one line on stderr
saying what is wrong and how to fix it, and exit status 2 (130 after Ctrl-C); damaged
stores are detected by ``rmtl store verify`` and named on read; run-directory files that
could run code are refused, never loaded (docs/errors.md).

Most cases run the real ``rmtl.cli.run`` in this process (what ``rmtl`` runs, without
the interpreter start-up); a few run the console entry points as subprocesses, including
a real SIGINT during ``render-and-embed``.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from rmtl.cli import run
from rmtl.errors import ConfigError, StoreError
from rmtl.tasks.fetch_lift.layout import store_description

VIEWS = "wide_view"
STORE_VIEWS = "wide_view,close_up"
"""The views of the store the cases point at (the session's tiny store)."""


# ------------------------------------------------------------------------------ fixtures
class Crafted:
    """A pickle that would create ``marker`` if anything unpickled it."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.fixture(scope="module")
def fx(tiny_store, tmp_path_factory):
    """A copy of the session's tiny store (2 episodes, 2 views, 64 px, embedded with the default
    model) and the other things the cases point at."""
    from conftest import TINY_STORE, copy_store
    from storage.dataset import DatasetStore

    assert ",".join(TINY_STORE["views"]) == STORE_VIEWS and TINY_STORE["resolution"] == 64
    d = tmp_path_factory.mktemp("bad_inputs")
    store = copy_store(tiny_store, d)
    DatasetStore.create(d / "empty.zarr", **store_description(), views=[VIEWS], resolution=64).close()
    (d / "afile").write_text("not a directory")
    (d / "foreign").mkdir()
    (d / "foreign" / "notes.txt").write_text("hi")
    root = d / "root.zarr"
    shutil.copytree(store, root)
    (root / "zarr.json").write_bytes((root / "zarr.json").read_bytes()[:200])
    emb = d / "emb.zarr"
    shutil.copytree(store, emb)
    _damage(next((emb / "embeddings").glob("*/c/0/0/0")), "flip")
    # a Stage-1 style run directory whose files are crafted pickles
    ck = d / "run" / "checkpoints" / "step_000000064"
    ck.mkdir(parents=True)
    (d / "run" / "checkpoints" / "latest.txt").write_text(ck.name)
    (ck / "model.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (ck / "meta.json").write_text(json.dumps({"num_timesteps": 64, "config": {"env": {}}}))
    (ck / "vecnormalize.pkl").write_bytes(pickle.dumps(Crafted(d / "PWNED_vecnormalize")))
    import torch

    torch.save({"net": Crafted(d / "PWNED_manager")}, ck / "manager.pt")
    # runs a user damaged or moved: garbage model.zip, meta.json not JSON, latest.txt naming a removed step
    for name, model, meta, latest in [("garbage", b"not a zip file", '{"config": {"env": {}}}', "step_000000064"),
                                      ("badmeta", b"PK\x05\x06" + b"\0" * 18, "{not json", "step_000000064"),
                                      ("stale", b"PK\x05\x06" + b"\0" * 18, "{}", "step_000000999")]:
        c = d / f"{name}_run" / "checkpoints" / "step_000000064"
        c.mkdir(parents=True)
        (c / "model.zip").write_bytes(model)
        (c / "meta.json").write_text(meta)
        (c.parent / "latest.txt").write_text(latest)
    (d / "binary.yaml").write_bytes(bytes(range(256)))
    return {"dir": d, "S": str(store), "E": str(d / "empty.zarr"), "F": str(d / "afile"), "D": str(d / "foreign"),
            "ROOT": str(root), "EMB": str(emb), "RUN": str(d / "run"), "W": str(d / "work")}


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Commands set environment variables (--data-dir): restore them after each case."""
    saved = dict(os.environ)
    monkeypatch.setenv("RMTL_DATA_DIR", str(tmp_path / "data"))
    yield
    os.environ.clear()
    os.environ.update(saved)


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif how == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:
        path.unlink()


def one_error_line(capsys, rc: int, code: int = 2) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == code, err[-3000:]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error: ") and "Traceback" not in err
    return lines[0]


def fill(args: list[str], fx: dict) -> list[str]:
    return [a.format(**fx) for a in args]


# --------------------------------------------------------- usage, values, paths, stores
CASES = [
    # usage errors (typer's vendored click)
    (["nosuchcmd"], ["No such command 'nosuchcmd'", "rmtl --help"]),
    (["render-and-embed", "--episods", "2"], ["No such option: --episods", "--episodes", "rmtl render-and-embed --help"]),
    (["render-and-embed", "--episodes", "0"], ["'--episodes'", "greater than or equal to 1"]),
    (["render-and-embed", "--resolution", "abc"], ["'--resolution'", "valid integer"]),
    (["render-and-embed", "--batch-size", "0"], ["'--batch-size'"]),
    (["render-and-embed", "--workers", "0"], ["'--workers'"]),
    (["render-and-embed", "--noise-std", "-1"], ["'--noise-std'"]),
    (["query"], ["Missing option '--store'", "rmtl query --help"]),
    (["env", "nosuch"], ["No such command 'nosuch'", "rmtl env --help"]),
    (["env", "preview", "--seed", "abc"], ["'--seed'"]),
    (["env", "check", "--episodes", "0"], ["'--episodes'"]),
    (["server", "nosuch"], ["No such command 'nosuch'"]),
    (["train", "stage1", "--steps", "abc"], ["'--steps'"]),
    (["train", "stage2"], ["Missing option '--worker'"]),
    (["eval", "{RUN}", "--episodes", "0"], ["'--episodes'"]),
    (["store", "verify"], ["Missing argument", "rmtl store verify --help"]),
    (["diagnose-rollouts", "--store", "{W}/missing.zarr"], ["no dataset store", "missing.zarr"]),
    (["bc-labels", "--out", "{W}/bc.zarr", "--episodes", "0"], ["'--episodes'"]),
    # invalid values, checked before the model loads
    (["render-and-embed", "--stages", "0,9", "--store", "{W}/r.zarr"], ["stages", "0..4"]),
    (["render-and-embed", "--stages", "0,x"], ["stages must be comma-separated integers"]),
    (["render-and-embed", "--views", "top"], ["unknown camera view 'top'", "choose from"]),
    (["render-and-embed", "--policy", "{W}/missing.zip", "--store", "{W}/r.zarr"], ["policy checkpoint", "does not exist"]),
    (["render-and-embed", "--model", "no-such-model", "--store", "{W}/r.zarr"], ["unknown model 'no-such-model'"]),
    (["env", "preview", "--difficulty", "2"], ["difficulty 2.0 is outside [0, 1]"]),
    (["env", "preview", "--resolution", "5000"], ["resolution 5000 is out of range"]),
    (["train", "stage1", "--variant", "nope"], ["unknown Stage-1 variant 'nope'", "choose from"]),
    (["train", "stage1", "--set", "foo=1"], ["Stage1Config.foo"]),
    (["train", "stage1", "--set", "noequals"], ["must look like key.subkey=value"]),
    (["train", "stage1", "--config", "{W}/missing.yaml"], ["does not exist"]),
    (["query", "--store", "{S}", "--radii", "a"], ["radii must be comma-separated numbers"]),
    (["query", "--store", "{S}", "--holdout", "2"], ["holdout must be a fraction"]),
    (["query", "--store", "{S}", "--alpha", "5"], ["alpha must be in [0, 1]"]),
    (["alpha-sweep", "--store", "{S}", "--alphas", "0,x"], ["alphas must be comma-separated numbers"]),
    (["per-view-analysis", "--store", "{S}", "--row", "99999", "--out", "{W}/pv"], ["row 99999 is not an analysed row"]),
    (["per-view-analysis", "--store", "{S}", "--episodes", "a"], ["episodes must be comma-separated integers"]),
    # output paths that cannot be written: named before any work
    (["render-and-embed", "--store", "/proc/x.zarr"], ["/proc/x.zarr", "cannot be written"]),
    (["render-and-embed", "--data-dir", "/proc/rmtl-x", "--episodes", "1"], ["/proc/rmtl-x/stores/default.zarr", "cannot be written"]),
    (["render-and-embed", "--store", "{F}"], ["is a file, not a store directory"]),
    (["query", "--store", "{S}", "--out", "{F}/q"], ["{F}", "is a file, not a directory"]),
    (["alpha-sweep", "--store", "{S}", "--out", "/proc/x"], ["--out /proc/x", "cannot be written"]),
    (["reward-quality", "--store", "{S}", "--against", "rmtl-fetch-tiny", "--out", "/proc/x.json"], ["--out /proc/x.json"]),
    (["env", "preview", "--out", "/proc/nope/x.png"], ["--out /proc/nope/x.png", "cannot be written"]),
    (["env", "check", "--episodes", "1", "--out", "/proc/x.json"], ["--out /proc/x.json"]),
    (["bc-labels", "--out", "/proc/x.zarr", "--episodes", "1"], ["store /proc/x.zarr cannot be written"]),
    (["bc-labels", "--store", "/proc/x.zarr", "--episodes", "1"], ["store /proc/x.zarr cannot be written"]),
    (["train", "stage1", "--out", "/proc/x", "--steps", "64"], ["--out /proc/x", "cannot be written"]),
    (["report", "{RUN}", "--out", "{F}/x"], ["is a file, not a directory"]),
    (["train-reward-vlm", "--store", "{S}", "--out", "/proc/x"], ["--out /proc/x"]),
    # stores that are missing, foreign, empty, damaged, of other settings
    (["query", "--store", "/nonexistent/store.zarr"], ["no dataset store at /nonexistent/store.zarr", "rmtl render-and-embed"]),
    (["query", "--store", "{D}"], ["is not a dataset store", "rmtl render-and-embed"]),
    (["query", "--store", "{E}"], ["has no embeddings yet", "rmtl embed --store"]),
    (["alpha-sweep", "--store", "{E}"], ["has no embeddings yet"]),
    (["query", "--store", "{ROOT}"], ["corrupt metadata", "zarr.json is not valid JSON"]),
    (["query", "--store", "{EMB}"], ["is damaged", "embeddings/", "rows 0-7", "rmtl store verify {EMB}"]),
    (["query", "--store", "{S}", "--model", "nosuch"], ["unknown model 'nosuch'", "pass one of them with --model"]),
    (["query", "--store", "{S}", "--model", "rmtl-fetch-fast@random"],
     ["no embeddings of 'rmtl-fetch-fast@random'", "rmtl embed --store"]),
    (["reward-quality", "--store", "{S}"], ["rmtl-fetch-tiny@random", "rmtl embed --store {S} --model rmtl-fetch-tiny@random"]),
    (["render-and-embed", "--store", "{S}", "--views", "wide_view", "--resolution", "64"], ["different settings", "views/resolution"]),
    (["render-and-embed", "--store", "{D}"], ["is not a dataset store"]),
    (["bc-labels", "--out", "{S}", "--episodes", "1"], ["different settings", "not a bc_labels store"]),
    (["embed", "--store", "/nonexistent"], ["no dataset store at /nonexistent"]),
    (["store", "verify", "/nonexistent"], ["no dataset store at /nonexistent"]),
    (["store", "verify", "{ROOT}"], ["corrupt metadata"]),
    (["train-reward-vlm", "--store", "/nonexistent", "--out", "{W}/v"], ["no dataset store at /nonexistent"]),
    # argparse-based commands behind rmtl
    (["train-reward-vlm"], ["Missing option '--out'", "rmtl train-reward-vlm --help"]),
    (["train-reward-vlm", "--bogus", "--out", "{W}/v"], ["No such option: --bogus", "rmtl train-reward-vlm --help"]),
    (["train-reward-vlm", "--steps", "abc", "--out", "{W}/v"], ["'--steps'", "valid integer"]),
    (["train-reward-vlm", "--select-by", "maybe", "--out", "{W}/v"], ["--select-by", "'maybe' is not one of", "caption_loss"]),
    # checkpoints and runs
    (["eval", "/nonexistent"], ["is not a Stage-1 checkpoint"]),
    (["train", "stage2", "--worker", "/nonexistent"], ["is not a Stage-1 checkpoint"]),
    (["train", "stage2-report", "/nonexistent"], ["is not a Stage-1 checkpoint"]),
    (["report", "/nonexistent"], ["is not a Stage-1 run directory"]),
    # found by replaying a user's bad inputs (results/errors)
    (["render-and-embed", "--episodes", "99999999999999999999999", "--store", "{W}/a.zarr"],
     ["'--episodes'", "less than or equal to 1000000"]),
    (["eval", "{dir}/garbage_run"], ["garbage_run/checkpoints/step_000000064/model.zip is not a readable SB3 model"]),
    (["eval", "{dir}/badmeta_run"], ["badmeta_run/checkpoints/step_000000064/meta.json is not valid JSON"]),
    (["train", "select", "{dir}/badmeta_run"], ["meta.json is not valid JSON"]),
    (["train", "select", "/nonexistent/run"], ["run directory /nonexistent/run does not exist"]),
    (["eval", "{dir}/stale_run"], ["checkpoints/latest.txt names 'step_000000999', which has no model.zip",
                                   "step_000000064"]),
    (["train", "stage1", "--config", "{dir}/binary.yaml"], ["binary.yaml is not a text file"]),
    (["train", "stage1", "--config", "{D}"], ["{D} is a directory; pass the path of a YAML file"]),
    (["env", "preview", "--seed", "-1"], ["'--seed'", "greater than or equal to 0"]),
    (["embed", "--store", "{S}", "--model", "ViT-B-32:{D}/notes.txt"], ["'notes.txt' is not a weights file"]),
    (["query", "--store", "{S}/state"], ["is the array 'state' inside the dataset store {S}", "pass the store's path: {S}"]),
    (["train", "stage1", "--variant", "", "--out", "{W}/r"], ["--variant is empty", "rmtl, "]),
    (["train", "stage1", "--net-arch-pi", "0", "--out", "{W}/r"], ["--net-arch-pi 0: hidden layer sizes must be"]),
    (["train", "stage1", "--torch-threads", "0", "--out", "{W}/r"], ["--torch-threads 0"]),
    (["train", "stage1", "--device", "bogus", "--out", "{W}/r"], ["--device 'bogus' is not a torch device"]),
    (["render-and-embed", "--data-dir", "", "--episodes", "1"], ["--data-dir is empty"]),
    (["env", "preview", "--data-dir", ""], ["--data-dir is empty"]),
]


@pytest.mark.parametrize("args, words", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_one_line_and_status_2(fx, capsys, args, words):
    line = one_error_line(capsys, run(fill(args, fx)))
    for w in fill(words, fx):
        assert w in line, line


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_cuda_device_without_cuda_is_refused(fx, capsys):
    line = one_error_line(capsys, run(["train", "stage1", "--device", "cuda", "--out", fx["W"] + "/r"]))
    assert "--device cuda:" in line and "no CUDA device" in line and "--device cpu" in line


def test_steps_round_up_to_whole_rollouts_and_say_so(capsys, monkeypatch):
    from rmtl.train.config import Stage1Config, rollout_rounding_note, stage1_config

    cfg = stage1_config("rmtl", total_timesteps=64, n_envs=16, n_steps=40)
    assert cfg.total_timesteps == 640 and cfg.requested_timesteps == 64
    assert cfg.rounding_note() == ("--steps 64 rounds up to 640 env steps: PPO trains in whole rollouts "
                                   "of n_envs*n_steps = 16*40 = 640 steps")
    again = Stage1Config.make(**cfg.model_dump())  # whole rollouts: unchanged, nothing to say
    assert again.total_timesteps == 640 and again.rounding_note() is None
    # a changed rollout rounds the requested steps, not the earlier rounding
    assert cfg.replace(n_envs=2).total_timesteps == 80 and stage1_config("rmtl", cfg, n_envs=2).total_timesteps == 80
    assert Stage1Config().total_timesteps == 600_320 and stage1_config("rmtl", n_envs=8).total_timesteps == 600_000
    # Stage 2 trains in the worker's rollouts, known only when it runs: the same line, from the same function.
    assert rollout_rounding_note(200_000, 16, 40) == ("--steps 200000 rounds up to 200320 env steps: PPO trains in "
                                                      "whole rollouts of n_envs*n_steps = 16*40 = 640 steps")
    assert rollout_rounding_note(128, 2, 16) is None
    monkeypatch.setenv("COLUMNS", "250")  # the help is a table: keep each option's text on one line
    assert run(["train", "stage1", "--help"]) == 0
    text = capsys.readouterr().out
    steps = text[text.index("--total-timesteps INT"):].split("(default")[0]  # the field's docstring as its help
    assert "rounded up to whole rollouts of n_envs*n_steps" in " ".join(steps.replace("│", "").split())
    assert "--steps = --total-timesteps" in text


# A bad path fails before torch, open_clip or MuJoCo load (they take seconds): a fresh interpreter each.
FAST = [["query", "--store", "/nonexistent.zarr"], ["embed", "--store", "/nonexistent.zarr"],
        ["alpha-sweep", "--store", "/nonexistent.zarr"],  # its config lives beside the step: still light
        ["eval", "/nonexistent/run"], ["train", "select", "/nonexistent/run"],
        ["render-and-embed", "--episodes", "99999999999999999999999"], ["env", "preview", "--seed", "-1"]]


@pytest.mark.parametrize("args", FAST, ids=[" ".join(a)[:40] for a in FAST])
@pytest.mark.slow
def test_a_bad_path_or_value_fails_without_loading_the_heavy_stack(args):
    code = ("import sys; from rmtl.cli import run; rc = run(sys.argv[1:]); "
            "heavy = [m for m in ('torch', 'open_clip', 'mujoco') if m in sys.modules]; "
            "print('loaded', heavy); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-2000:]
    assert p.stdout.strip() == "loaded []", p.stdout


def test_group_without_command_shows_help_and_one_line(capsys):
    rc = run(["env"])
    out = capsys.readouterr()
    assert rc == 2 and "preview" in out.out
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "missing command" in lines[0] and "rmtl env --help" in lines[0]


def test_help_and_success_exit_0(fx, capsys):
    assert run(["--help"]) == 0
    assert run(["store", "verify", fx["S"]]) == 0
    out = capsys.readouterr().out
    assert "checksummed; no damaged" in out


def test_locked_store_fails_before_the_model_loads(fx, capsys):
    lock = Path(fx["S"] + ".lock")
    lock.write_text(json.dumps({"pid": 1, "host": socket.gethostname(), "since": time.time(),
                                "heartbeat": time.time(), "token": uuid.uuid4().hex}))
    try:
        t = time.perf_counter()
        line = one_error_line(capsys, run(["render-and-embed", "--store", fx["S"], "--views", STORE_VIEWS,
                                           "--resolution", "64", "--model", "rmtl-fetch-tiny@random"]))
        assert "is locked by writer pid 1" in line and time.perf_counter() - t < 5
    finally:
        lock.unlink()


def test_offline_hub_model_fails_fast_with_one_line(capsys, monkeypatch):
    """No HF_HUB_OFFLINE, no cached weights, a hub that cannot be reached: one line within
    seconds (left to its retries, the hub client takes 26 s and prints 11 lines)."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    t = time.perf_counter()
    line = one_error_line(capsys, run(["render-and-embed", "--model", "hf-hub:timm/rmtl-no-such-model",
                                       "--store", str(Path(os.environ["RMTL_DATA_DIR"]) / "h.zarr")]))
    assert time.perf_counter() - t < 10
    assert "the hub cannot be reached" in line and "127.0.0.1:9" in line


# ------------------------------------------------------------------ console scripts
def _console(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "HF_HUB_OFFLINE": "1"}
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(Path(__file__).resolve().parent.parent))


@pytest.mark.parametrize("args, words", [
    (["-m", "rmtl.cli", "render-and-embed", "--episods", "2"], ["No such option: --episods"]),
    (["-m", "rmtl.cli", "serve"], ["no Prefect API to serve to"]),  # status 2 from serve
    (["-m", "rmtl.cli", "serve", "--limit", "x"], ["--limit", "rmtl serve --help"]),
    (["-m", "flows.serve", "--limit", "x"], ["--limit", "python -m flows.serve --help"]),
    (["-m", "flows.server", "nosuch"], ["'ACTION'", "'nosuch' is not one of start, stop, status, run"]),
], ids=["rmtl usage", "rmtl serve no API", "rmtl serve usage", "flows.serve usage", "flows.server usage"])
@pytest.mark.slow
def test_console_entry_points(args, words):
    r = _console(*args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert lines[0].startswith("error: ") and all(w in lines[0] for w in words), lines[0]


@pytest.mark.slow
def test_module_mains_return_status_2(tmp_path, capsys):
    from flows.render_and_embed import main as flow_main
    from pipeline.train_vlm import main as train_main

    assert train_main(["--bogus", "--out", str(tmp_path)]) == 2
    assert "python -m pipeline.train_vlm --help" in one_error_line(capsys, 2)
    assert flow_main(["--episodes", "0"]) == 2
    assert "episodes" in one_error_line(capsys, 2)


@pytest.mark.slow
def test_sigint_during_render_and_embed_exits_130_and_keeps_the_store(tmp_path):
    from storage.dataset import DatasetStore

    store = tmp_path / "sigint.zarr"
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "HF_HUB_OFFLINE": "1"}
    # Many episodes, so that on a loaded machine the job is still rendering when the signal lands.
    p = subprocess.Popen([sys.executable, "-m", "rmtl.cli", "render-and-embed", "--episodes", "400", "--views", VIEWS,
                          "--resolution", "64", "--store", str(store)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=str(Path(__file__).resolve().parent.parent),
                         # a suite started in the background by a shell inherits SIGINT ignored
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while not (store / "zarr.json").exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # rendering
        assert p.poll() is None, "the job ended before it could be interrupted"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 130, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: interrupted") and "run the same command again" in lines[0]
    assert not Path(f"{store}.lock").exists()
    with DatasetStore.open(store) as ds:  # what was committed is intact
        assert ds.verify().ok


# ------------------------------------------------------------------------ corruption
KINDS = {
    "frames": "frames/c/0/0/0/0/0",
    "state": "state/c/0/0",
    "episode": "episode/c/0",
    "embeddings": "embeddings/*/c/1/0/0",
    "text_embeddings": "text_embeddings/*/c/0/0",
}


def _read_kind(ds, kind: str) -> None:
    if kind in ("frames", "state", "episode"):
        ds.read(fields=[kind])
    elif kind == "embeddings":
        ds.embeddings(ds.model_ids()[0])
    else:
        ds.text_embeddings(ds.model_ids()[0])


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_damage_of_each_array_kind_is_found_by_verify_and_named_on_read(fx, tmp_path, capsys, kind, how):
    from storage.dataset import DatasetStore

    store = tmp_path / "d.zarr"
    shutil.copytree(fx["S"], store)
    _damage(next(store.glob(KINDS[kind])), how)
    line = one_error_line(capsys, run(["store", "verify", str(store)]))
    assert f"store {store} has 1 damaged part" in line
    with DatasetStore.open(store) as ds:
        rep = ds.verify()
        assert len(rep.damage) == 1 and rep.damage[0].array.split("/")[0] == kind, rep.damage
        assert ("missing" if how == "delete" else "checksum mismatch") in rep.damage[0].problem
        with pytest.raises(StoreError) as e:
            _read_kind(ds, kind)
    msg = str(e.value)
    assert "\n" not in msg and str(store) in msg and f"rmtl store verify {store}" in msg
    if kind == "text_embeddings" and how == "delete":  # NaN-filled table: "incomplete, embed again"
        assert "are incomplete" in msg and "rmtl embed" in msg
        return
    assert kind in msg and ("rows" in msg or "prompts" in msg)
    if how == "delete":  # named, not read back as fill values (zeros, NaN)
        assert "chunk file is missing" in msg


# Each reader path on a store with one chunk file deleted: the command (or the training
# reader) stops with the one line naming the array and its rows, instead of reading zeros.
READERS = [
    ("state", "state/c/0/0", ["query", "--store", "{X}"]),
    ("episode", "episode/c/0", ["export", "minari", "{X}", "--name", "damaged"]),
    ("frames", "frames/c/0/0/0/0/0", ["embed", "--store", "{X}", "--model", "rmtl-fetch-tiny@random"]),
    ("embeddings", "embeddings/*/c/1/0/0", ["query", "--store", "{X}"]),
]


@pytest.mark.parametrize("kind,chunk,args", READERS, ids=[r[0] for r in READERS])
def test_a_missing_chunk_stops_each_reader_naming_array_and_rows(fx, tmp_path, capsys, monkeypatch, kind, chunk,
                                                                args):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    store = tmp_path / "d.zarr"
    shutil.copytree(fx["S"], store)
    _damage(next(store.glob(chunk)), "delete")
    line = one_error_line(capsys, run([a.format(X=store, W=tmp_path / "w") for a in args]))
    assert f"store {store} is damaged: cannot read {kind}" in line
    assert ("rows 8-" if kind == "embeddings" else "rows 0-") in line
    assert "chunk file is missing" in line and f"rmtl store verify {store}" in line


@pytest.mark.parametrize("chunk", ["key/c/0/0", "embeddings/*/c/0/0/0"])
def test_a_missing_chunk_stops_the_cache_build_and_the_training_reader(fx, tmp_path, chunk):
    from storage import DatasetStore, StateCache

    store = tmp_path / "d.zarr"
    shutil.copytree(fx["S"], store)
    with DatasetStore.open(store) as ds:
        model = ds.model_ids()[0]
        n = ds.num_rows
    _damage(next(store.glob(chunk)), "delete")
    array = chunk.split("/c/")[0].replace("*", "")
    with DatasetStore.open(store) as ds, pytest.raises(StoreError, match=f"cannot read {array}.* rows 0-"):
        StateCache.open(ds, model, preload=True)  # builds the index and preloads the embeddings
    with DatasetStore.open(store) as ds, pytest.raises(StoreError, match="chunk file is missing"):
        ds.embeddings(model, np.arange(n)) if "embeddings" in chunk else ds.read(np.array([n - 1, 0]), ["key"])


def test_the_chunk_check_reads_intact_rows_and_lists_each_chunk_once(fx, tmp_path, monkeypatch):
    """Rows whose chunks are all there read as before; a chunk found once is not looked up again."""
    from storage.dataset import DatasetStore

    store = tmp_path / "d.zarr"
    shutil.copytree(fx["S"], store)
    _damage(next(store.glob("embeddings/*/c/1/0/0")), "delete")
    with DatasetStore.open(store) as ds:
        model = ds.model_ids()[0]
        assert ds.embeddings(model, slice(0, 8)).shape[0] == 8  # chunk 0 is intact
        calls = []
        exists = ds.location.fs.exists
        monkeypatch.setattr(ds.location.fs, "exists", lambda p: calls.append(p) or exists(p))
        ds.read(slice(0, 4), ["state"])
        ds.read(slice(2, 6), ["state"])
        assert len(calls) == 1
        with pytest.raises(StoreError, match="rows 8-"):
            ds.embeddings(model, [3, 9])


def test_verify_lists_each_damaged_chunk_on_stdout(fx, tmp_path, capsys):
    store = tmp_path / "d.zarr"
    shutil.copytree(fx["S"], store)
    _damage(store / "frames/c/0/0/0/0/0", "truncate")
    _damage(next(store.glob("embeddings/*/c/0/0/0")), "flip")
    rc = run(["store", "verify", str(store)])
    out = capsys.readouterr()
    assert rc == 2 and len([ln for ln in out.err.splitlines() if ln.strip()]) == 1
    damaged = [ln for ln in out.out.splitlines() if ln.startswith("DAMAGED ")]
    assert len(damaged) == 2
    assert any(ln.startswith("DAMAGED frames chunk 0.0.0.0.0 rows 0-") and "view wide_view" in ln for ln in damaged)
    assert any(ln.startswith("DAMAGED embeddings/") and "chunk 0.0.0 rows 0-7" in ln for ln in damaged)


def test_damaged_frames_are_named_when_a_command_reads_them(fx, tmp_path, capsys):
    store = tmp_path / "d.zarr"
    shutil.copytree(fx["S"], store)
    _damage(store / "frames/c/0/0/0/0/0", "truncate")
    line = one_error_line(capsys, run(["embed", "--store", str(store), "--model", "rmtl-fetch-tiny@random"]))
    assert "is damaged: cannot read frames chunk 0.0.0.0.0" in line and f"rmtl store verify {store}" in line


def test_old_stores_without_checksums_still_open_and_verify(tmp_path, monkeypatch):
    """A store written before checksums: opens, reads, appends; verify still finds a
    truncated blosc chunk from its header."""
    import storage.dataset as sd

    monkeypatch.setattr(sd, "_CODECS", (sd._COMPRESSOR,))
    monkeypatch.setattr(sd, "INTEGRITY", {})
    monkeypatch.setattr(sd, "_WRITE_ALL", {"write_empty_chunks": False})
    path = tmp_path / "old.zarr"
    with sd.DatasetStore.create(path, views=["a"], resolution=8, frames=False, state_dim=3, key_dim=2) as ds:
        n = 50
        ds.append({"state": np.random.rand(n, 3), "key": np.random.rand(n, 2), "episode": np.arange(n) // 10 + 1,
                   "step": np.arange(n) % 10, "phase_rule": np.zeros(n, np.int8), "success": np.zeros(n, bool),
                   "difficulty": np.ones(n)})
    monkeypatch.undo()
    assert "crc32c" not in (path / "state" / "zarr.json").read_text()
    with sd.DatasetStore.open(path, "a") as ds:
        assert ds.info.get("integrity") == {} and len(ds.read()["state"]) == 50
        rep = ds.verify()
        assert rep.ok and not rep.checksums
    _damage(path / "state/c/0/0", "truncate")
    with sd.DatasetStore.open(path) as ds:
        rep = ds.verify()
    assert len(rep.damage) == 1 and "truncated" in rep.damage[0].problem


# ----------------------------------------------------------------- crafted run files
def test_crafted_pickle_in_a_run_directory_is_refused_and_never_run(fx, capsys):
    d = Path(fx["dir"])
    line = one_error_line(capsys, run(["eval", fx["RUN"]]))
    assert "vecnormalize.pkl is a pickle" in line and "does not load pickles" in line
    line = one_error_line(capsys, run(["train", "stage2-report", fx["RUN"], "--out", fx["W"] + "/rep"]))
    assert "manager.pt" in line and "rmtl does not load it" in line
    assert not list(d.glob("PWNED*"))


def test_crafted_torch_checkpoints_are_refused(tmp_path):
    import torch

    from pipeline.train_vlm import load_checkpoint
    from rmtl.train.stage2.manager_callback import load_manager

    marker = tmp_path / "PWNED"
    torch.save({"model": {}, "step": Crafted(marker)}, tmp_path / "checkpoint.pt")
    with pytest.raises(ConfigError, match="holds Python objects besides tensors"):
        load_checkpoint(tmp_path / "checkpoint.pt")
    (tmp_path / "manager.pt").write_bytes(pickle.dumps(Crafted(marker), protocol=2))  # a plain pickle, not torch's zip
    with pytest.raises(ConfigError, match="manager.pt"):
        load_manager(tmp_path / "manager.pt")
    assert not marker.exists()


def test_vecnormalize_statistics_round_trip_as_json(tmp_path):
    """vecnormalize.json restores what the pickle held: the same normalised observations."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from rmtl.train.run.artifacts import NORMALIZER_FILE, load_normalizer, restore_normalizer, save_normalizer

    class DictEnv(gym.Env):
        observation_space = gym.spaces.Dict({"a": gym.spaces.Box(-5, 5, (3,)), "b": gym.spaces.Box(0, 1, (2,))})
        action_space = gym.spaces.Box(-1, 1, (1,))

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, False, False, {}

    vn = VecNormalize(DummyVecEnv([DictEnv]), norm_obs=True, norm_reward=False, norm_obs_keys=["a"])
    vn.reset()
    for _ in range(20):
        vn.step(np.zeros((1, 1)))
    save_normalizer(vn, tmp_path)
    assert json.loads((tmp_path / NORMALIZER_FILE).read_text())["format"] == "rmtl.vecnormalize"
    obs = {"a": np.array([[1.0, -2.0, 3.0]], np.float32), "b": np.array([[0.2, 0.4]], np.float32)}
    frozen = load_normalizer(tmp_path).normalize_obs(obs)
    ref = vn.normalize_obs(obs)
    for k in obs:
        np.testing.assert_array_equal(frozen[k], ref[k])
    fresh = VecNormalize(DummyVecEnv([DictEnv]), norm_obs=True, norm_reward=False, norm_obs_keys=["a"])
    assert restore_normalizer(fresh, tmp_path)
    np.testing.assert_array_equal(fresh.obs_rms["a"].mean, vn.obs_rms["a"].mean)
    assert fresh.obs_rms["a"].count == vn.obs_rms["a"].count


def test_ctrl_c_inside_a_gl_call_is_raised_when_the_call_ends():
    """The console's handler holds a SIGINT that lands in a deferred block (a render) and
    raises it at the block's end; outside one it raises at once."""
    from rmtl.console import _watch_sigint
    from rmtl.interrupts import deferred_sigint

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("needs Python's default SIGINT handler to install the console's")
    ended_block = False
    with _watch_sigint():
        with pytest.raises(KeyboardInterrupt):
            with deferred_sigint():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler has run: nothing raised inside the block
                ended_block = True
        assert ended_block
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)


def test_ctrl_c_while_a_render_store_is_made_leaves_a_store_the_same_command_resumes(tmp_path, monkeypatch):
    """A SIGINT that lands while render-and-embed creates its store (before the creation commits) is
    held until the store is whole: the store opens, holds nothing, and its writer lock is gone."""
    from pipeline.jobs.render import open_for_render
    from pipeline.jobs.rollout import RolloutConfig
    from rmtl.console import _watch_sigint
    from storage.dataset import DatasetStore

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("needs Python's default SIGINT handler to install the console's")
    create = DatasetStore.create.__func__

    def create_interrupted(cls, *args, **kwargs):
        store = create(cls, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C landed before create returned
        time.sleep(0.05)
        return store

    monkeypatch.setattr(DatasetStore, "create", classmethod(create_interrupted))
    path = tmp_path / "made.zarr"
    cfg = RolloutConfig.make(task="fetch_lift", episodes=2, views=("front",), resolution=64, seed=0)
    with _watch_sigint(), pytest.raises(KeyboardInterrupt):
        open_for_render(path, cfg)
    assert not Path(f"{path}.lock").exists()
    monkeypatch.undo()
    store, resumed = open_for_render(path, cfg)  # the same settings resume the empty store
    with store:
        assert resumed and store.num_rows == 0


def test_the_listing_check_of_object_storage_finds_a_missing_chunk_too(fx, tmp_path, monkeypatch):
    """Reads of many chunks on object storage check one listing of the array instead of a look-up
    per chunk file; forced here on a local copy, it stops at a deleted frames chunk the same way."""
    import storage.dataset_read as reader
    from storage.dataset import DatasetStore

    store = tmp_path / "d.zarr"
    shutil.copytree(fx["S"], store)
    _damage(next(store.glob("frames/c/0/0/0/0/0")), "delete")
    monkeypatch.setattr(reader, "_STAT_LOCAL", False)
    monkeypatch.setattr(reader, "_EXISTS_MAX", 0)  # the fixture's few chunks would be looked up one by one
    with DatasetStore.open(store) as ds:
        listed = []
        find = ds.location.fs.find
        monkeypatch.setattr(ds.location.fs, "find", lambda p, **kw: listed.append(p) or find(p, **kw))
        with pytest.raises(StoreError, match="cannot read frames.*chunk file is missing"):
            ds.read(fields=["frames"])
        assert listed and listed[0].endswith("/frames")

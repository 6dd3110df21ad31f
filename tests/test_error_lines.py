"""More bad inputs, each run as the real command in its own interpreter (``python -m rmtl``):
exactly one ``error:`` line on stderr, status 2, no traceback, and for a check that should come
before any model code loads, the error before torch is imported (read from the interpreter's own
``-X importtime`` log, not a wall clock: busy cores slow both alike; docs/errors.md). Also: every
command an error line suggests works.

The inputs are tiny: a copy of the session's tiny store (2 episodes, 2 views, 64 px), copies of it
damaged or given another model's embeddings, run directories with one damaged file.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # every case runs the real command in a fresh interpreter

REPO = Path(__file__).resolve().parent.parent
KEPT_RUN = REPO / "results" / "stage1_vlm_budget" / "rmtl_s1"
"""A Stage-1 run kept as its logs (config.yaml, eval.csv, curriculum.csv)."""
R5 = "rmtl-fetch-fast-r5"
"""A model that declares a renderer other than the package default (mesh_reduction 0.9, no MSAA)."""
FAST_S = 10.0
"""Marks a check made before torch loads (tested by the import log); the time bound of every case
is HANG_S, a guard against a command that hangs or starts its work."""
HANG_S = 120.0


@pytest.fixture(scope="module")
def w(tiny_store, tmp_path_factory):
    """The inputs the cases point at (the store: a copy of the session's tiny store)."""
    from conftest import copy_store
    from rmtl.vlm.spec import parse_spec
    from storage.dataset import DatasetStore

    d = tmp_path_factory.mktemp("error_lines")
    s = copy_store(tiny_store, d)
    # the same frames with embeddings of a model trained on another renderer (as `embed` wrote them before)
    r5 = d / "r5.zarr"
    shutil.copytree(s, r5)
    with DatasetStore.open(r5, "a") as ds:
        emb = np.random.default_rng(0).normal(size=(ds.num_rows, len(ds.views), 128)).astype(np.float32)
        emb /= np.linalg.norm(emb, axis=-1, keepdims=True)
        ds.add_embeddings(parse_spec(R5).model_id, 0, emb, meta={"spec": R5})
    trunc = d / "trunc_frames.zarr"
    shutil.copytree(s, trunc)
    chunk = next(trunc.glob("frames/c/0/0/0/0/0"))
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
    # run directories: a worker checkpoint whose meta.json is not JSON; a run stopped with only resume/
    ck = d / "badmeta_run" / "checkpoints" / "step_000000064"
    ck.mkdir(parents=True)
    (ck / "model.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (ck / "meta.json").write_text("{not json")
    (ck.parent / "latest.txt").write_text(ck.name)
    res = d / "resume_run" / "resume"
    res.mkdir(parents=True)
    (res / "model.zip").write_bytes(b"not a zip")
    (res / "meta.json").write_text(json.dumps({"num_timesteps": 64, "config": {"env": {}}}))
    # Stage-1 runs for `rmtl report`: one whole, four with one damaged file each
    runs = d / "runs"
    for name in ("good", "badmeta", "randcsv", "bincfg", "listcfg"):
        (runs / name).mkdir(parents=True)
        for f in ("config.yaml", "eval.csv", "curriculum.csv"):
            shutil.copy(KEPT_RUN / f, runs / name / f)
    bm = runs / "badmeta" / "checkpoints" / "step_1"
    bm.mkdir(parents=True)
    (bm.parent / "latest.txt").write_text("step_1")
    (bm / "meta.json").write_text("{not json")
    (runs / "randcsv" / "eval.csv").write_bytes(bytes(np.random.default_rng(1).integers(0, 256, 300, dtype=np.uint8)))
    (runs / "bincfg" / "config.yaml").write_bytes(bytes(range(256)))
    (runs / "listcfg" / "config.yaml").write_text("- a\n- b\n")
    # model folders: weights and a broken renderer.json; a config but no weights
    m = d / "model_badrenderer"
    m.mkdir()
    cfg = json.loads((REPO / "rmtl" / "vlm" / "model_configs" / "rmtl-fetch-tiny.json").read_text())
    (m / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    shutil.copy(REPO / "rmtl" / "vlm" / "weights" / "rmtl-fetch-tiny" / "open_clip_model.safetensors", m)
    (m / "renderer.json").write_text('{"msaa_samples": 0,')
    nw = d / "model_noweights"
    nw.mkdir()
    (nw / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    (d / "miss.yaml").write_text("name: miss\nbaseline: a robot gripper and a red cube on a table\ngoals:\n"
                                 "  approach: a robot gripper above a red cube\n  align: a robot gripper pinching a red cube\n")
    (d / "notes.txt").write_text("notes, not a run\n")
    return {"W": str(d), "S": str(s), "R5S": str(r5), "TRUNC": str(trunc), "BADMETA": str(d / "badmeta_run"),
            "RESUME": str(d / "resume_run"), "RUNS": str(runs), "BADREND": str(m), "NOWEIGHTS": str(nw),
            "MISS": str(d / "miss.yaml"), "NOTES": str(d / "notes.txt"),
            "TINY_FAST_WEIGHTS": f"rmtl-fetch-tiny:{REPO}/rmtl/vlm/weights/rmtl-fetch-fast/open_clip_model.safetensors"}


def _env(w: dict, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RMTL_DEBUG",) and not k.startswith("AWS_")}
    env.update(PYTHONPATH=str(REPO), RMTL_DATA_DIR=f"{w['W']}/data", MINARI_DATASETS_PATH=f"{w['W']}/minari",
               HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="", HOME=f"{w['W']}/home", AWS_EC2_METADATA_DISABLED="true",
               **extra)
    return env


def rmtl(args: list[str], w: dict, timeout: float = 120, imports: bool = False,
         **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """The command in a fresh interpreter; ``imports``: with ``-X importtime``, whose log lines are
    taken out of stderr and left, as the imported modules' names, in ``p.imported``."""
    t = time.monotonic()
    p = subprocess.run([sys.executable, *(["-X", "importtime"] if imports else []), "-m", "rmtl",
                        *[a.format(**w) for a in args]], capture_output=True, text=True, timeout=timeout,
                       env=_env(w, **env), cwd=w["W"])
    log = [ln for ln in p.stderr.splitlines() if ln.startswith("import time:")]
    p.imported = {ln.rsplit("|", 1)[-1].strip() for ln in log}
    p.stderr = "\n".join(ln for ln in p.stderr.splitlines() if not ln.startswith("import time:"))
    return p, time.monotonic() - t


def error_line(args: list[str], w: dict, bound: float = FAST_S, **env: str) -> str:
    """The one error line; ``bound`` FAST_S: it comes before torch is imported."""
    p, secs = rmtl(args, w, timeout=HANG_S, imports=True, **env)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr and len(lines) == 1 and lines[0].startswith("error: "), p.stderr[-3000:]
    assert p.imported, "no import log: -X importtime wrote nothing"
    if bound <= FAST_S:
        assert "torch" not in p.imported, f"torch was imported before the error ({secs:.1f} s to it)"
    return lines[0]


# (arguments of rmtl, words the line holds, seconds allowed to the error line)
CASES = {
    "stage2 worker meta.json not JSON": (["train", "stage2", "--worker", "{BADMETA}", "--out", "{W}/s2"],
                                         ["step_000000064/meta.json is not valid JSON", "restore it"], FAST_S),
    "embed a model of another renderer": (["embed", "--store", "{S}", "--model", R5],
                                          ["renderer mj-", "mesh_reduction=0.75, msaa_samples=4",
                                           "mesh_reduction=0.9, msaa_samples=0", "rmtl render-and-embed"], FAST_S),
    "query embeddings of another renderer": (["query", "--store", "{R5S}", "--model", R5, "--out", "{W}/q"],
                                             ["mesh_reduction=0.9", "msaa_samples=4", R5], FAST_S),
    "reward-quality embeddings of another renderer": (["reward-quality", "--store", "{R5S}", "--model", R5],
                                                      ["declares renderer"], FAST_S),
    "return-ranking embeddings of another renderer": (["return-ranking", "--store", "{R5S}", "--model", R5],
                                                      ["declares renderer"], FAST_S),
    "export minari embeddings of another renderer": (["export", "minari", "{R5S}", "--name", "r5", "--model", R5],
                                                     ["declares renderer"], FAST_S),
    "embed a model folder with a broken renderer.json": (["embed", "--store", "{S}", "--model", "{BADREND}"],
                                                         ["{BADREND}/renderer.json is not valid JSON"], FAST_S),
    "render-and-embed a model folder with a broken renderer.json": (
        ["render-and-embed", "--store", "{W}/rb.zarr", "--model", "{BADREND}", "--episodes", "1"],
        ["{BADREND}/renderer.json is not valid JSON"], FAST_S),
    "query a truncated frames chunk": (["query", "--store", "{TRUNC}", "--out", "{W}/q"],
                                       ["cannot read frames chunk 0.0.0.0.0", "truncated", "rmtl store verify"], FAST_S),
    "export minari a truncated frames chunk": (["export", "minari", "{TRUNC}", "--name", "tf"],
                                               ["cannot read frames chunk", "truncated"], FAST_S),
    "dask scheduler that is not there": (["render-and-embed", "--dask-address", "tcp://127.0.0.1:1", "--store",
                                          "{W}/dask.zarr", "--episodes", "1"],
                                         ["Dask scheduler at tcp://127.0.0.1:1 cannot be reached", "dask scheduler"],
                                         FAST_S),
    "export minari prompt set missing a micro-task": (["export", "minari", "{S}", "--name", "m", "--prompts", "{MISS}"],
                                                      ["{MISS} misses a goal for the micro-task 'grasp'"], FAST_S),
    "export lerobot prompt set missing a micro-task": (["export", "lerobot", "{S}", "--out", "{W}/lr", "--prompts",
                                                        "{MISS}"], ["misses a goal for the micro-task 'grasp'"], FAST_S),
    "return-ranking --model nosuch": (["return-ranking", "--store", "{S}", "--model", "nosuch"],
                                      ["unknown model 'nosuch'", "pass one of them with --model"], FAST_S),
    "reward-quality --model nosuch": (["reward-quality", "--store", "{S}", "--model", "nosuch"],
                                      ["unknown model 'nosuch'"], FAST_S),
    "export lerobot --model nosuch": (["export", "lerobot", "{S}", "--out", "{W}/lr2", "--model", "nosuch"],
                                      ["unknown model 'nosuch'"], FAST_S),
    "embed-text --model nosuch": (["embed-text", "--store", "{S}", "--prompts", "paper", "--model", "nosuch"],
                                  ["unknown model 'nosuch'"], FAST_S),
    "query --model a folder without weights": (["query", "--store", "{S}", "--model", "{NOWEIGHTS}"],
                                               ["model folder {NOWEIGHTS} has no weights"], FAST_S),
    "render-and-embed --task nosuch": (["render-and-embed", "--task", "nosuch", "--store", "{W}/t.zarr"],
                                       ["RenderAndEmbedConfig.task='nosuch'", "known tasks"], FAST_S),
    "train stage1 --task nosuch": (["train", "stage1", "--task", "nosuch", "--out", "{W}/tr"],
                                   ["Stage1Config.task='nosuch'"], FAST_S),
    "train select FILE": (["train", "select", "{NOTES}"], ["is a file, not a run directory"], FAST_S),
    "train stage1 --set reward.kind=": (["train", "stage1", "--set", "reward.kind=", "--out", "{W}/tr2"],
                                        ["the reward kind is empty", "vlm"], FAST_S),
    "weights of another architecture": (["embed", "--store", "{S}", "--model", "{TINY_FAST_WEIGHTS}"],
                                        ["Error(s) in loading state_dict for CLIP", "missing keys (visual.",
                                         "unexpected keys (visual."], 60.0),
    "eval a run with only resume/": (["eval", "{RESUME}", "--episodes", "1"],
                                     ["resume_run/resume/model.zip is not a readable SB3 model"], FAST_S),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2(w, case):
    args, words, bound = CASES[case]
    line = error_line(args, w, bound)
    for word in words:
        assert word.format(**w) in line, line


@pytest.mark.parametrize("args", [["store", "verify", "s3://b/x.zarr"], ["query", "--store", "s3://b/x.zarr"]])
@pytest.mark.parametrize("creds", [{}, {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}], ids=["none", "given"])
def test_s3_without_credentials_or_endpoint_is_one_line(w, args, creds):
    """No credentials, or an endpoint that refuses (a local port nothing listens on): never the internet."""
    line = error_line(args, w, AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_ENDPOINT_URL_S3="http://127.0.0.1:9",
                      **creds)
    assert "cannot reach store s3://b/x.zarr" in line and "AWS_ACCESS_KEY_ID" in line and "~/.aws" in line
    assert ("no usable credentials" if not creds else "cannot be reached") in line


def test_report_names_each_damaged_run_and_reports_the_others(w):
    p, secs = rmtl(["report", "{RUNS}", "--out", "{W}/report"], w)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert len(lines) == 4 and all(ln.startswith("error: skipped run ") for ln in lines), lines
    for run, why in [("badmeta", "meta.json is not valid JSON"), ("randcsv", "eval.csv is not a CSV log"),
                     ("bincfg", "config.yaml is not a text file"), ("listcfg", "config.yaml holds a YAML list")]:
        assert any(f"runs/{run}:" in ln and why in ln for ln in lines), (run, lines)
    rows = (Path(w["W"]) / "report" / "final_success.csv").read_text().splitlines()
    assert len(rows) == 2 and "/good" in rows[1]  # the whole run is reported
    assert secs < 30


def test_a_run_with_only_resume_is_evaluated_from_it(tmp_path):
    from rmtl.train.run.run_dir import resolve_checkpoint

    (tmp_path / "resume").mkdir()
    (tmp_path / "resume" / "model.zip").write_bytes(b"PK")
    assert resolve_checkpoint(tmp_path) == tmp_path / "resume"
    (tmp_path / "resume" / "model.zip").unlink()
    with pytest.raises(Exception, match="resume/"):
        resolve_checkpoint(tmp_path)


# ------------------------------------------------------------------ suggested commands work
SUGGESTS = [
    ["reward-quality", "--store", "{X}"],  # -> rmtl embed --store X --model rmtl-fetch-tiny@random
    ["embed", "--store", "{X}", "--model", R5],  # -> rmtl render-and-embed --store <new> --model R5 --episodes 1 ...
    ["query", "--store", "{X}", "--prompts", "{W}/new_texts.yaml"],  # -> rmtl embed-text ...
    ["export", "minari", "{X}", "--name", "m", "--prompts", "{MISS}"],  # no command: the set is at fault
    ["return-ranking", "--store", "{X}", "--model", "nosuch"],  # no command: the model is at fault
    ["query", "--store", "{X}", "--model", "{NOWEIGHTS}"],
    ["query", "--store", "{DAMAGED}"],  # -> rmtl store verify X (lists the damage, status 2 by design)
]
_SUGGESTION = re.compile(r"`(rmtl [^`]+)`|(?:^|[:;] )(rmtl (?:embed|embed-text|render-and-embed|store verify)\b[^;`()]*)")


def suggested_commands(line: str) -> list[str]:
    return [(a or b).strip().rstrip(".") for a, b in _SUGGESTION.findall(line)]


def test_every_suggested_command_works(w, tmp_path):
    """The commands the error lines of bad inputs suggest, run as written: none fails with the
    same or another bad-input error."""
    (tmp_path / "new_texts.yaml").write_text("name: new\nbaseline: a table with a robot and a red cube\ngoals:\n"
                                             "  approach: a gripper over a cube\n  align: a cube between open jaws\n"
                                             "  grasp: a cube held up by a gripper\n")
    suggestions = []
    for i, args in enumerate(SUGGESTS):
        x = tmp_path / f"s{i}.zarr"
        shutil.copytree(w["S"], x)
        damaged = tmp_path / f"d{i}.zarr"
        shutil.copytree(w["S"], damaged)
        next(damaged.glob("state/c/0/0")).unlink()
        fx = {**w, "X": str(x), "DAMAGED": str(damaged), "W": str(tmp_path)}
        line = error_line([a.format(**fx) for a in args], w, bound=60)
        suggestions += [(line, c) for c in suggested_commands(line)]
    commands = [c for _, c in suggestions]
    assert any(c.startswith("rmtl embed --store") for c in commands), suggestions
    assert any(c.startswith("rmtl render-and-embed") for c in commands), suggestions
    assert any(c.startswith("rmtl embed-text") for c in commands), suggestions
    assert not any("nosuch" in c or "noweights" in c or "miss.yaml" in c for c in commands), suggestions
    for line, command in suggestions:
        p, _ = rmtl(shlex.split(command)[1:], w, timeout=300)
        if command.startswith("rmtl store verify"):  # lists what is damaged on stdout, then one line, status 2
            assert p.returncode == 2 and "DAMAGED state chunk" in p.stdout, (command, p.stderr[-2000:])
            continue
        assert p.returncode == 0, (line, command, p.stderr[-2000:])

"""Replay bad inputs as a user would type them, each as a real subprocess, and record how
each ended: exit status, the first line of stderr (stdout if stderr is empty), seconds.

    python experiments/errors/replay.py --label after                     # this checkout
    python experiments/errors/replay.py --label before --code OLD_CHECKOUT  # another checkout of rmtl

Rows for the label are replaced in cases.csv (the other label's rows are kept), so the
two runs give the before/after table of README.md. A case still running after its
timeout is recorded as "timeout" with what it had printed: a command that hangs, or one
that accepted a bad value and started its work (it is stopped there).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CSV = REPO / "results" / "errors" / "cases.csv"
FIELDS = ["case", "item", "label", "command", "exit", "seconds", "first_line"]


def fixtures(w: Path, code: Path) -> dict[str, str]:
    """Small inputs the cases point at, made once under ``w`` (one 1-episode store, 64 px)."""
    w.mkdir(parents=True, exist_ok=True)
    s = w / "s.zarr"
    if not (s / "zarr.json").exists():
        shutil.rmtree(s, ignore_errors=True)
        subprocess.run([sys.executable, "-c", "from pipeline.jobs.render_and_embed import RenderAndEmbedConfig as C, "
                        f"render_and_embed as r; r(C.make(store={str(s)!r}, episodes=1, views=['wide_view'], resolution=64), "
                        "progress=False)"], env=_env(code, w), check=True, capture_output=True)
    for name, chunk in [("state", "state/c/0/0"), ("episode", "episode/c/0"), ("frames", "frames/c/0/0/0/0/0"),
                        ("emb", "embeddings/*/c/1/0/0")]:
        d = w / f"no_{name}.zarr"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(s, d)
        next(d.glob(chunk)).unlink()
    (w / "notes.txt").write_text("notes, not a checkpoint\n")
    (w / "binary.yaml").write_bytes(bytes(range(256)))
    (w / "confdir").mkdir(exist_ok=True)

    def run_dir(name: str, model: bytes, meta: str, latest: str = "step_000000064") -> str:
        ck = w / name / "checkpoints" / "step_000000064"
        ck.mkdir(parents=True, exist_ok=True)
        (ck / "model.zip").write_bytes(model)
        (ck / "meta.json").write_text(meta)
        (ck.parent / "latest.txt").write_text(latest)
        return str(w / name)

    meta = json.dumps({"num_timesteps": 64, "config": {"env": {}}})
    extra = _more_fixtures(w, code, s, run_dir, meta)
    return {**extra, "W": str(w), "S": str(s), **{f"NO_{k.upper()}": str(w / f"no_{k}.zarr")
                                         for k in ("state", "episode", "frames", "emb")},
            "NOTES": str(w / "notes.txt"), "BIN": str(w / "binary.yaml"), "DIR": str(w / "confdir"),
            "GARBAGE_RUN": run_dir("garbage_run", b"this is not a zip file", meta),
            "BADMETA_RUN": run_dir("badmeta_run", b"PK\x05\x06" + b"\0" * 18, "{not json"),
            "MISSING_STEP_RUN": run_dir("missing_step_run", b"PK\x05\x06" + b"\0" * 18, meta, "step_000000999")}


R5 = "rmtl-fetch-fast-r5"
"""A model that declares a renderer other than the package default."""


def _more_fixtures(w: Path, code: Path, s: Path, run_dir, meta: str) -> dict[str, str]:
    """Inputs of the later cases: a store with embeddings of a model of another renderer, a
    truncated frames chunk, Stage-1 runs with one damaged file each, model folders (broken
    renderer.json; no weights), a prompt set missing a micro-task, a run with only resume/."""
    r5 = w / "r5.zarr"
    if not (r5 / "zarr.json").exists():
        shutil.rmtree(r5, ignore_errors=True)
        shutil.copytree(s, r5)
        # embedded as `rmtl embed` did before it compared renderers (the check switched off here)
        subprocess.run([sys.executable, "-c", "import pipeline.jobs.embed as e; e.check_model_renderer = lambda *a, **k: None; "
                        f"e.embed_store({str(r5)!r}, {R5!r}, progress=False)"],
                       env=_env(code, w), check=True, capture_output=True)
    s_copy = w / "s_copy.zarr"  # what `embed` may write into
    shutil.rmtree(s_copy, ignore_errors=True)
    shutil.copytree(s, s_copy)
    trunc = w / "trunc_frames.zarr"
    shutil.rmtree(trunc, ignore_errors=True)
    shutil.copytree(s, trunc)
    chunk = next(trunc.glob("frames/c/0/0/0/0/0"))
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
    kept = REPO / "results" / "stage1_vlm_budget" / "rmtl_s1"
    runs = w / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    for name in ("good", "badmeta", "randcsv", "bincfg", "listcfg"):
        (runs / name).mkdir(parents=True)
        for f in ("config.yaml", "eval.csv", "curriculum.csv"):
            shutil.copy(kept / f, runs / name / f)
    (runs / "badmeta" / "checkpoints" / "step_1").mkdir(parents=True)
    (runs / "badmeta" / "checkpoints" / "latest.txt").write_text("step_1")
    (runs / "badmeta" / "checkpoints" / "step_1" / "meta.json").write_text("{not json")
    (runs / "randcsv" / "eval.csv").write_bytes(bytes((i * 97 + 13) % 256 for i in range(300)))
    (runs / "bincfg" / "config.yaml").write_bytes(bytes(range(256)))
    (runs / "listcfg" / "config.yaml").write_text("- a\n- b\n")
    arch = json.loads((REPO / "rmtl" / "vlm" / "model_configs" / "rmtl-fetch-tiny.json").read_text())
    for name, weights, renderer in [("model_badrenderer", True, '{"msaa_samples": 0,'), ("model_noweights", False, None)]:
        m = w / name
        m.mkdir(exist_ok=True)
        (m / "open_clip_config.json").write_text(json.dumps({"model_cfg": arch}))
        if weights:
            shutil.copy(REPO / "rmtl" / "vlm" / "weights" / "rmtl-fetch-tiny" / "open_clip_model.safetensors", m)
        if renderer:
            (m / "renderer.json").write_text(renderer)
    (w / "miss.yaml").write_text("name: miss\nbaseline: a robot gripper and a red cube on a table\ngoals:\n"
                                 "  approach: a robot gripper above a red cube\n  align: a robot gripper pinching a red cube\n")
    res = w / "resume_run" / "resume"
    res.mkdir(parents=True, exist_ok=True)
    (res / "model.zip").write_bytes(b"this is not a zip file")
    (res / "meta.json").write_text(meta)
    return {"S_COPY": str(s_copy), "R5S": str(r5), "TRUNC": str(trunc), "RUNS": str(runs), "BADREND": str(w / "model_badrenderer"),
            "NOWEIGHTS": str(w / "model_noweights"), "MISS": str(w / "miss.yaml"), "RESUME_RUN": str(w / "resume_run"),
            "TINY_FAST_WEIGHTS": f"rmtl-fetch-tiny:{REPO}/rmtl/vlm/weights/rmtl-fetch-fast/open_clip_model.safetensors"}


S3_ENV = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9"}
"""An S3 endpoint nothing listens on (no request leaves the machine), and no credentials."""

# (case id, item, arguments of `rmtl`, timeout in seconds[, extra environment])
CASES = [
    ("missing state chunk: query", "A", ["query", "--store", "{NO_STATE}", "--out", "{W}/q"], 60),
    ("missing episode chunk: export minari", "A", ["export", "minari", "{NO_EPISODE}", "--name", "replay"], 60),
    ("missing frames chunk: embed", "A", ["embed", "--store", "{NO_FRAMES}", "--model", "rmtl-fetch-tiny@random"], 60),
    ("missing embeddings chunk: query", "A", ["query", "--store", "{NO_EMB}", "--out", "{W}/q"], 60),
    ("huge --episodes", "B", ["render-and-embed", "--episodes", "99999999999999999999999", "--store", "{W}/a.zarr"], 20),
    ("garbage model.zip: eval", "B", ["eval", "{GARBAGE_RUN}", "--episodes", "1"], 60),
    ("invalid meta.json: eval", "B", ["eval", "{BADMETA_RUN}", "--episodes", "1"], 60),
    ("invalid meta.json: train select", "B", ["train", "select", "{BADMETA_RUN}", "--validation-episodes", "1"], 60),
    ("binary --config", "B", ["train", "stage1", "--config", "{BIN}"], 30),
    ("env preview --seed -1", "B", ["env", "preview", "--seed", "-1", "--out", "{W}/preview"], 60),
    ("--model ARCH:notes.txt", "B", ["embed", "--store", "{S}", "--model", "ViT-B-32:{NOTES}"], 60),
    ("--store an array inside a store", "B", ["query", "--store", "{S}/state"], 30),
    ("latest.txt names a missing step: eval", "B", ["eval", "{MISSING_STEP_RUN}", "--episodes", "1"], 60),
    ("--config DIR", "B", ["train", "stage1", "--config", "{DIR}"], 30),
    ("--device cuda without CUDA", "B", ["train", "stage1", "--device", "cuda", "--steps", "64", "--out", "{W}/r1"], 15),
    ("--net-arch-pi 0", "B", ["train", "stage1", "--net-arch-pi", "0", "--steps", "64", "--out", "{W}/r2"], 15),
    ("--variant ''", "B", ["train", "stage1", "--variant", "", "--steps", "64", "--out", "{W}/r3"], 15),
    ("--torch-threads 0", "B", ["train", "stage1", "--torch-threads", "0", "--steps", "64", "--out", "{W}/r4"], 15),
    ("--data-dir ''", "B", ["render-and-embed", "--data-dir", "", "--episodes", "1"], 15),
    ("missing store: query", "B", ["query", "--store", "/nonexistent.zarr"], 60),
    ("missing store: embed", "B", ["embed", "--store", "/nonexistent.zarr"], 60),
    ("missing store: render-and-embed into a file", "B", ["render-and-embed", "--store", "{NOTES}/x.zarr"], 60),
    ("missing run: eval", "B", ["eval", "/nonexistent/run"], 60),
    ("missing run: train select", "B", ["train", "select", "/nonexistent/run"], 60),
    ("missing config: train stage1", "B", ["train", "stage1", "--config", "/nonexistent.yaml"], 60),
    ("worker meta.json not JSON: train stage2", "C", ["train", "stage2", "--worker", "{BADMETA_RUN}", "--out",
                                                      "{W}/s2"], 60),
    ("damaged runs below DIR: report", "C", ["report", "{RUNS}", "--out", "{W}/report"], 60),
    ("model of another renderer: embed", "C", ["embed", "--store", "{S_COPY}", "--model", R5], 60),
    ("embeddings of another renderer: query", "C", ["query", "--store", "{R5S}", "--model", R5, "--out", "{W}/q"], 60),
    ("embeddings of another renderer: reward-quality", "C", ["reward-quality", "--store", "{R5S}", "--model", R5], 60),
    ("embeddings of another renderer: return-ranking", "C", ["return-ranking", "--store", "{R5S}", "--model", R5], 60),
    ("embeddings of another renderer: export minari", "C", ["export", "minari", "{R5S}", "--name", "r5", "--model",
                                                            R5], 60),
    ("broken renderer.json: embed", "C", ["embed", "--store", "{S_COPY}", "--model", "{BADREND}"], 60),
    ("broken renderer.json: render-and-embed", "C", ["render-and-embed", "--store", "{W}/rb.zarr", "--model",
                                                     "{BADREND}", "--episodes", "1"], 60),
    ("truncated frames chunk: query", "C", ["query", "--store", "{TRUNC}", "--out", "{W}/q"], 60),
    ("truncated frames chunk: export minari", "C", ["export", "minari", "{TRUNC}", "--name", "tf"], 60),
    ("S3 without credentials: query", "C", ["query", "--store", "s3://b/x.zarr"], 60, S3_ENV),
    ("S3 without credentials: store verify", "C", ["store", "verify", "s3://b/x.zarr"], 60, S3_ENV),
    ("--dask-address nobody listens on", "C", ["render-and-embed", "--dask-address", "tcp://127.0.0.1:1", "--store",
                                               "{W}/dask.zarr", "--episodes", "1"], 90),
    ("prompt set missing a micro-task: export minari", "C", ["export", "minari", "{S}", "--name", "m", "--prompts",
                                                             "{MISS}"], 60),
    ("prompt set missing a micro-task: export lerobot", "C", ["export", "lerobot", "{S}", "--out", "{W}/lr",
                                                              "--prompts", "{MISS}"], 60),
    ("--model nosuch: return-ranking", "C", ["return-ranking", "--store", "{S}", "--model", "nosuch"], 60),
    ("--model nosuch: reward-quality", "C", ["reward-quality", "--store", "{S}", "--model", "nosuch"], 60),
    ("--model nosuch: export lerobot", "C", ["export", "lerobot", "{S}", "--out", "{W}/lr2", "--model", "nosuch"], 60),
    ("--model nosuch: embed-text", "C", ["embed-text", "--store", "{S}", "--prompts", "paper", "--model", "nosuch"],
     60),
    ("--model DIR without weights: query", "C", ["query", "--store", "{S}", "--model", "{NOWEIGHTS}"], 60),
    ("--task nosuch: render-and-embed", "C", ["render-and-embed", "--task", "nosuch", "--store", "{W}/t.zarr"], 60),
    ("train select FILE", "C", ["train", "select", "{NOTES}"], 60),
    ("--set reward.kind= (empty)", "C", ["train", "stage1", "--set", "reward.kind=", "--out", "{W}/tr2"], 60),
    ("weights of another architecture: embed", "C", ["embed", "--store", "{S_COPY}", "--model", "{TINY_FAST_WEIGHTS}"],
     90),
    ("run with only resume/: eval", "C", ["eval", "{RESUME_RUN}", "--episodes", "1"], 60),
]


def _env(code: Path, w: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RMTL_DEBUG", "PYTHONPATH")}
    env.update(PYTHONPATH=str(code), MUJOCO_GL=env.get("MUJOCO_GL", "egl"), RMTL_DATA_DIR=str(w / "data"),
               MINARI_DATASETS_PATH=str(w / "minari"), HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    return env


def replay(code: Path, w: Path, only: list[str] | None = None, items: list[str] | None = None) -> list[dict[str, str]]:
    fx = fixtures(w, code)
    rows = []
    for case, item, args, timeout, *more in CASES:
        if only and not any(o in case for o in only):
            continue
        if items and item not in items:
            continue
        argv = [a.format(**fx) for a in args]
        env = _env(code, w)
        if more:
            env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
            env.update(HOME=str(w / "home"), AWS_EC2_METADATA_DISABLED="true", **more[0])
        t = time.monotonic()
        # its own session, so a timeout stops the command and everything it started
        p = subprocess.Popen([sys.executable, "-m", "rmtl", *argv], cwd=w, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
            rc = str(p.returncode)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            rc = "timeout"
        secs = time.monotonic() - t
        lines = [ln.strip() for ln in (err or out or "").splitlines() if ln.strip()]
        first = lines[0] if lines else ""
        if "Traceback" in (err or ""):  # the line that says what went wrong, not the header
            first = f"[traceback, {len(lines)} lines] {lines[-1]}"
        # The same text whatever the work folder and checkout: results never hold a machine's paths.
        first = first.replace(str(w), "{W}").replace(str(code).rstrip("/") + "/", "")
        rows.append({"case": case, "item": item, "label": "", "command": "rmtl " + " ".join(
            repr(a) if a == "" else a for a in args), "exit": rc, "seconds": f"{secs:.1f}", "first_line": first[:300]})
        print(f"{rc:>7} {secs:6.1f}s  {case}: {first[:160]}", flush=True)
    return rows


def table(path: Path = CSV) -> str:
    """The before/after Markdown table of cases.csv, and the median seconds to the error line."""
    import statistics

    with path.open() as f:
        rows = list(csv.DictReader(f))
    by = {(r["case"], r["label"]): r for r in rows}
    cases = list(dict.fromkeys(r["case"] for r in rows))
    out = ["| case | command | before: exit, s, first line | after: exit, s, first line |", "|---|---|---|---|"]
    cell = lambda r: f"{r['exit']}, {r['seconds']} s, `{r['first_line'][:110].replace('|', '/')}`" if r else "-"  # noqa: E731
    for c in cases:
        b, a = by.get((c, "before")), by.get((c, "after"))
        out.append(f"| {c} | `{(a or b)['command']}` | {cell(b)} | {cell(a)} |")
    both = [c for c in cases if (c, "before") in by and (c, "after") in by and by[(c, "after")]["exit"] == "2"]
    med = {lab: statistics.median(float(by[(c, lab)]["seconds"]) for c in both) for lab in ("before", "after")}
    out.append(f"\nMedian seconds to the outcome over the {len(both)} cases that end with exit 2 after: "
               f"before {med['before']:.1f} s, after {med['after']:.1f} s.")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", default="after", help="before or after")
    ap.add_argument("--code", default=str(REPO), help="checkout of rmtl to run (default: this one)")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "rmtl-replay"),
                    help="where the inputs and outputs go (a folder per label)")
    ap.add_argument("--only", nargs="*", help="replay only cases whose name contains one of these")
    ap.add_argument("--item", nargs="*", help="replay only cases of these items (A, B, C)")
    ap.add_argument("--table", action="store_true", help="print the Markdown table of cases.csv and exit")
    a = ap.parse_args()
    if a.table:
        print(table())
        return
    rows = replay(Path(a.code).resolve(), Path(a.work).resolve() / a.label, a.only, a.item)
    for r in rows:
        r["label"] = a.label
    kept = []
    if CSV.exists():
        with CSV.open() as f:
            done = {r["case"] for r in rows}
            kept = [r for r in csv.DictReader(f) if not (r["label"] == a.label and r["case"] in done)]
    order = {c[0]: i for i, c in enumerate(CASES)}
    allrows = sorted(kept + rows, key=lambda r: (order.get(r["case"], 999), r["label"] != "before"))
    with CSV.open("w", newline="") as f:
        wr = csv.DictWriter(f, FIELDS)
        wr.writeheader()
        wr.writerows(allrows)


if __name__ == "__main__":
    main()

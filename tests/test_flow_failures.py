"""What a user is told when a flow or its inputs fail, each through the real command:

- ``prefect deployment run ... --watch`` of a flow that fails prints the one-line reason
  (``error: ...``) and the flow run's state message is that line (what the UI shows);
- ``rmtl render-and-embed --prefect`` prints absolute paths and writes a ``last_summary.json``
  that strict JSON readers take (``null``, never ``NaN``);
- ``--dask-address`` of a scheduler with no workers says within seconds that it waits, and
  gives up after its stated timeout with one line (status 2).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import PROCESS_TAG_VAR as TAG_VAR
from conftest import prefect_client_env
from flows.process_group import kill_group

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path, tag: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, TAG_VAR: tag, "RMTL_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1",
           "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "OMP_NUM_THREADS": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_RUNNER_POLL_FREQUENCY": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PREFECT_API_URL", None)
    env.update(extra)
    return env


def _no_nan(text: str):
    def refuse(constant: str):
        raise AssertionError(f"{constant} in a JSON file")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.slow
def test_deployment_watch_shows_the_one_line_reason(prefect_server, tmp_path, kill_tagged):
    """On the session's server, under a deployment name of this test's own."""
    from flows.local import api, deployment_exists

    tag = uuid.uuid4().hex
    server = prefect_server
    name = f"watch-{tag[:8]}"
    serve = None
    try:
        env = prefect_client_env(server, tmp_path / "prefect", _env(tmp_path, tag))
        with open(tmp_path / "serve.log", "wb") as log:
            serve = subprocess.Popen([sys.executable, "-m", "flows.serve", "--flow", "alpha-sweep", "--name", name],
                                     env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 240
        while not deployment_exists(server.url, "alpha-sweep", name):
            assert serve.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(1)
        store = tmp_path / "nowhere.zarr"
        run = subprocess.run([sys.executable, "-m", "prefect", "deployment", "run", f"alpha-sweep/{name}",
                              "--param", f"config={json.dumps({'store': str(store)})}", "--watch",
                              "--watch-timeout", "240"],
                             env={**env, "COLUMNS": "400"}, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        out = run.stdout + run.stderr
        assert run.returncode == 1, out
        assert out.splitlines()[0].startswith(f"Creating flow run for deployment 'alpha-sweep/{name}'"), out
        reason = f"no dataset store at {store}"
        error_lines = [ln for ln in out.splitlines() if "error: " in ln]
        assert error_lines and reason in error_lines[0], out  # --watch printed the flow run's one-line reason
        flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)
        state = api(server.url, f"/flow_runs/{flow_run_id}")["state"]
        assert state["type"] == "FAILED" and state["message"].startswith(reason), state
        assert "\n" not in state["message"] and "Traceback" not in state["message"]
    finally:
        if serve is not None:
            kill_group(serve, timeout=15)
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running: {leftovers}"


@pytest.mark.slow
def test_render_and_embed_prefect_prints_absolute_paths_and_writes_strict_json(tmp_path, kill_tagged):
    """No PREFECT_API_URL: the one command starts a server of its own and stops it (a private server,
    not the session's: nothing it started may be left running)."""
    tag = uuid.uuid4().hex
    env = _env(tmp_path, tag, PREFECT_HOME=str(tmp_path / "data" / "prefect"))
    try:
        run = subprocess.run([sys.executable, "-m", "rmtl", "render-and-embed", "--prefect", "--episodes", "1",
                              "--views", "wide_view", "--resolution", "64", "--model", "rmtl-fetch-tiny@random",
                              "--batch-size", "32"], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
        lines = run.stdout.splitlines()
        store = tmp_path / "data" / "stores" / "default.zarr"
        assert lines[0].startswith(f"store {store}: "), lines[0]  # the data dir expanded, not $RMTL_DATA_DIR/...
        wrote = lines[lines.index("wrote:") + 1:]
        assert wrote and all(Path(p.strip()).is_absolute() for p in wrote), wrote
        assert "$RMTL_DATA_DIR" not in run.stdout
        summary_file = Path(wrote[-1].strip())
        assert summary_file.name == "last_summary.json" and summary_file.is_file()
        text = summary_file.read_text()
        assert "NaN" not in text and "Infinity" not in text
        summary = _no_nan(text)
        assert summary["rows"] > 0
    finally:
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running: {leftovers}"


def test_last_summary_json_has_null_for_nan(tmp_path, monkeypatch):
    """The writer itself: a quality metric that is NaN (a phase with no states) is written null
    and read back as n/a."""
    from types import SimpleNamespace

    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, format_summary, write_summary

    monkeypatch.setenv("RMTL_DATA_DIR", str(tmp_path / "data"))
    cfg = RenderAndEmbedConfig.make(name="nan", views=["wide_view"], resolution=64)
    nan = float("nan")
    mean = {k: nan for k in ("approach_spearman", "approach_spread", "align_spearman", "align_spread", "grasp_auc",
                             "grasp_spread", "right_prompt_accuracy", "step_variation")}
    mean.update(approach_count=0, align_count=0, grasp_count=0)
    quality = {"alpha": 0.9, "mean": mean, "views": {"wide_view": {"step_variation": nan}}}
    rendered = SimpleNamespace(rows=3, episodes_rendered=1, resumed=False)
    embedded = SimpleNamespace(model_id="m", rows_embedded=3, rows_copied=0, copied_from=None)
    summary = write_summary(cfg, rendered, embedded, {"files": [], "status": "built"}, quality, 1.0)
    back = _no_nan(Path(summary["summary_file"]).read_text())
    assert back["quality"]["mean"]["grasp_auc"] is None and back["quality"]["views"]["wide_view"]["step_variation"] is None
    assert back["store"].startswith("$RMTL_DATA_DIR/")  # the stored form stays portable
    back["summary_file"] = summary["summary_file"]
    text = format_summary(back)
    assert "grasp:    lifted-vs-resting ROC AUC n/a" in text
    assert text.splitlines()[0].startswith(f"store {tmp_path / 'data' / 'stores' / 'nan.zarr'}: ")


@pytest.mark.slow
def test_dask_scheduler_without_workers_says_it_waits_then_gives_up(tmp_path, kill_tagged):
    tag = uuid.uuid4().hex
    env = _env(tmp_path, tag, RMTL_DASK_WORKER_WAIT_S="8")
    info = tmp_path / "scheduler.json"
    sched = None
    try:
        with open(tmp_path / "scheduler.log", "wb") as log:
            sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                      "--port", "0", "--no-dashboard", "--scheduler-file", str(info)], env=env,
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while not (info.is_file() and json.loads(info.read_text() or "{}").get("address")):
            assert time.monotonic() < deadline and sched.poll() is None, (tmp_path / "scheduler.log").read_text()
            time.sleep(0.3)
        address = json.loads(info.read_text())["address"]
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "rmtl", "render-and-embed", "--dask-address", address,
                                 "--episodes", "1", "--views", "wide_view", "--resolution", "64", "--model",
                                 "rmtl-fetch-tiny@random", "--store", str(tmp_path / "s.zarr")],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        first = proc.stderr.readline().strip()
        t_first = time.monotonic() - t0
        rest = proc.stderr.read()
        proc.wait(120)
        t_end = time.monotonic() - t0
        assert first == (f"waiting for a Dask worker: the scheduler at {address} has none (up to 8 s; start one with "
                         f"`dask worker {address}`)"), (first, rest)
        lines = [ln for ln in rest.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1, (first, rest)
        assert lines[0] == (f"error: no Dask worker joined the scheduler at {address} within 8 s; start workers "
                            f"there (`dask worker {address}`), or leave out --dask-address to render with --workers "
                            f"local processes"), lines
        assert t_end - t_first >= 7, (t_first, t_end)  # it waited the stated time after saying so
        assert not (tmp_path / "s.zarr").exists()  # checked before anything was written
        print(f"\nwaiting line after {t_first:.1f} s, gave up after {t_end:.1f} s")
    finally:
        if sched is not None:
            kill_group(sched, timeout=10)
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running: {leftovers}"


def _job_commands(text: str) -> list[str]:
    """render-and-embed commands in a Markdown text's code blocks (continuation lines joined)."""
    text = text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        cmd = line.split(" #", 1)[0].strip()
        if ("render-and-embed/default'" in cmd and "deployment run" in cmd) or \
                cmd.startswith(("python -m flows.render_and_embed ", "rmtl render-and-embed", ".venv/bin/rmtl render-and-embed")) \
                or "&& .venv/bin/rmtl render-and-embed" in cmd:
            out.append(cmd[cmd.index("rmtl render") if "bin/rmtl render" in cmd else 0:])
    return out


def _store_settings(cmd: str) -> tuple[str, tuple]:
    import shlex

    words = shlex.split(cmd.replace("&", " "))
    opts: dict[str, str] = {}
    for i, w in enumerate(words):
        if w == "--param" and i + 1 < len(words):
            k, _, v = words[i + 1].partition("=")
            if k == "config":  # the flow's one parameter: its config as JSON
                opts.update({f: ",".join(x) if isinstance(x, list) else str(x) for f, x in json.loads(v).items()})
            else:
                opts[k] = v
        elif w.startswith("--") and w != "--param" and i + 1 < len(words) and not words[i + 1].startswith("--"):
            opts[w[2:].replace("-", "_")] = words[i + 1]
    store = opts.get("store") or opts.get("name", "default")
    return store, (opts.get("views", "all"), opts.get("resolution"), opts.get("model"))


def test_docs_deployment_examples_agree_on_each_store():
    """Run in order, the README's quick start and Prefect examples and docs/flows.md's write each
    store with one set of views, resolution and model (a store refuses any other)."""
    readme = (ROOT / "README.md").read_text()
    prefect = readme[readme.index("### Prefect"):]
    prefect = prefect[:prefect.index("\n### ", 5)]
    cmds = _job_commands(readme[:readme.index("\n```\n", readme.index("render-and-embed --episodes")) + 5]) \
        + _job_commands(prefect) + _job_commands((ROOT / "docs" / "flows.md").read_text())
    assert len(cmds) >= 5, cmds  # quick start, README's deployment run and --prefect, flows.md's two
    seen: dict[str, tuple] = {}
    for cmd in cmds:
        store, settings = _store_settings(cmd)
        assert seen.setdefault(store, settings) == settings, (store, seen[store], settings, cmd)

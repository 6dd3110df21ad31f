"""What a user is told when a flow or its inputs fail, each through the real command:

- ``prefect deployment run ... --watch`` of a flow that fails prints the one-line reason
  (``error: ...``) just before the run's end, with no engine traceback, and the flow run's state
  message is that line (what the UI shows);
- through the deployment, a Dask scheduler whose only worker was SIGKILLed mid-render: the wait
  is a line of the flow run's log and the message of its Running state, and the stop after the
  stated timeout the Failed state's message;
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


@pytest.fixture(scope="module")
def served(prefect_server, tmp_path_factory):
    """``python -m flows.serve`` of alpha-sweep and render-and-embed on the session's server, under a
    deployment name of this module's own; (environment, deployment name, API URL)."""
    from types import SimpleNamespace

    from conftest import _kill_tagged
    from flows.local import deployment_exists

    tmp = tmp_path_factory.mktemp("served")
    tag = uuid.uuid4().hex
    name = f"watch-{tag[:8]}"
    env = prefect_client_env(prefect_server, tmp / "prefect", _env(tmp, tag))
    with open(tmp / "serve.log", "wb") as log:
        serve = subprocess.Popen([sys.executable, "-m", "flows.serve", "--flows", "alpha-sweep", "render-and-embed",
                                  "--name", name], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not all(deployment_exists(prefect_server.url, f, name) for f in ("alpha-sweep", "render-and-embed")):
            assert serve.poll() is None and time.monotonic() < deadline, (tmp / "serve.log").read_text()
            time.sleep(1)
        yield SimpleNamespace(env=env, name=name, url=prefect_server.url, log=tmp / "serve.log")
    finally:
        kill_group(serve, timeout=15)
        leftovers = _kill_tagged(tag)
    assert not leftovers, f"processes left running: {leftovers}"


def _watch(served, flow: str, config: dict, cwd: Path, timeout: float = 300) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "prefect", "deployment", "run", f"{flow}/{served.name}", "--param",
                             f"config={json.dumps(config)}", "--watch", "--watch-timeout", str(int(timeout - 30))],
                            env={**served.env, "COLUMNS": "1000"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=cwd, start_new_session=True)


def _after_error_line(out: str, reason: str) -> list[str]:
    """The lines --watch printed after the ``error: <reason>`` log line (which must be there)."""
    lines = out.splitlines()
    at = [i for i, ln in enumerate(lines) if f"error: {reason}" in ln]
    assert at, out
    return lines[at[0] + 1:]


def _only_the_end(after: list[str], out: str) -> None:
    """After the error line: state events, the engine's one-line "Finished in state Failed(...)" and
    --watch's last line; no traceback, no other log line."""
    assert after and after[-1] == "Flow run finished in state 'Failed'.", out
    for ln in after[:-1]:
        assert "prefect.flow-run." in ln or "prefect.task-run." in ln or "Finished in state Failed(" in ln, (ln, out)
    assert "Traceback" not in out and "Engine execution exited" not in out and "Task run failed with" not in out, out


@pytest.mark.slow
def test_deployment_watch_shows_the_one_line_reason(served, tmp_path):
    """On the session's server: --watch shows the one-line reason just before the run's end, and no
    engine traceback after it (Prefect's flow engine logs the exception of a Failed state it re-raises)."""
    from flows.local import api

    store = tmp_path / "nowhere.zarr"
    watch = _watch(served, "alpha-sweep", {"store": str(store)}, tmp_path)
    out, _ = watch.communicate(timeout=300)
    assert watch.returncode == 1, out
    assert out.splitlines()[0].startswith(f"Creating flow run for deployment 'alpha-sweep/{served.name}'"), out
    reason = f"no dataset store at {store}"
    _only_the_end(_after_error_line(out, reason), out)  # --watch printed the flow run's one-line reason, then its end
    flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)
    state = api(served.url, f"/flow_runs/{flow_run_id}")["state"]
    assert state["type"] == "FAILED" and state["message"].startswith(reason), state
    assert "\n" not in state["message"] and "Traceback" not in state["message"]
    print(f"\n--watch printed {len(out.splitlines())} lines")


@pytest.mark.slow
def test_deployment_dask_worker_lost_is_told_on_the_flow_run(served, tmp_path, kill_tagged):
    """render-and-embed through the deployment, its only Dask worker SIGKILLed mid-render: the wait is a
    line of the flow run's log (what --watch and the UI show) and the message of its Running state; the
    stop after the stated timeout is the error line and the Failed state's message, with no traceback."""
    from flows.local import api
    from test_dask_worker_loss import _episodes, _scheduler, _sigkill_group, _worker

    tag = uuid.uuid4().hex
    env = _env(tmp_path, tag)
    store = tmp_path / "stores" / "deployed.zarr"
    episodes = 24
    procs: list[subprocess.Popen] = []
    try:
        sched, address = _scheduler(tmp_path, env)
        procs.append(sched)
        worker = _worker(tmp_path, env, address, "w0")
        procs.append(worker)
        config = {"store": str(store), "episodes": episodes, "views": ["wide_view"], "resolution": 64,
                  "model": "rmtl-fetch-tiny@random", "dask_address": address, "dask_worker_wait_s": 6}
        watch = _watch(served, "render-and-embed", config, tmp_path, timeout=420)
        procs.append(watch)
        deadline = time.monotonic() + 300
        while len(_episodes(store)) < 2:
            assert watch.poll() is None and time.monotonic() < deadline, \
                watch.stdout.read() if watch.poll() is not None else "no episode after 300 s"
            time.sleep(0.2)
        assert len(_episodes(store)) < episodes, "every episode was rendered before the test could kill the worker"
        _sigkill_group(worker)
        out, _ = watch.communicate(timeout=300)
        print(f"\n{out}")
        assert watch.returncode == 1, out
        kept = len(_episodes(store))
        waiting = (f"waiting for a Dask worker: the scheduler at {address} has no worker left ({kept} of {episodes} "
                   f"episodes are in {store}) (up to 6 s; start one with `dask worker {address}`)")
        reason = (f"no Dask worker came back to the scheduler at {address} within 6 s after its last one left; "
                  f"{kept} of {episodes} episodes are in {store}; start workers there")
        assert any(ln.endswith(waiting) for ln in out.splitlines()), out  # a log line of the flow run, streamed
        _only_the_end(_after_error_line(out, reason), out)
        flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)
        state = api(served.url, f"/flow_runs/{flow_run_id}")["state"]
        assert state["type"] == "FAILED" and state["message"].startswith(reason) and "\n" not in state["message"]
        history = api(served.url, f"/flow_run_states/?flow_run_id={flow_run_id}")
        assert any(s["type"] == "RUNNING" and s["message"] == waiting for s in history), history
        logs = api(served.url, "/logs/filter", {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200})
        assert any(lg["message"] == waiting and lg["level"] == 30 for lg in logs), [lg["message"] for lg in logs]
        assert not any("Traceback" in lg["message"] for lg in logs), [lg["message"] for lg in logs]
    finally:
        for p in reversed(procs):
            kill_group(p, timeout=10)
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

"""Run a flow through its deployment, end to end, on this machine (the main job's recipe).

``run_deployment`` does what a user does by hand (docs/flows.md):

1. use the Prefect API in ``PREFECT_API_URL`` if one is set, else start a local server
   (SQLite under ``<data dir>/prefect``, analytics off, a free loopback port);
2. start ``python -m flows.serve`` (its own process group) and wait for the deployment;
3. ``prefect deployment run '<flow>/<deployment>' --param ...`` and wait for the run to
   reach a final state (REST polling of the API, no event stream needed);
4. stop the serve process, and the server unless ``keep_server`` (then it is recorded
   like ``python -m flows.server start`` and ``python -m flows.server stop`` ends it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping

from flows.prefect_settings import client_env, prefect_home
from flows.process_group import kill_group
from flows.server import LocalServer, ServerError, start_background

FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


@dataclass
class DeploymentRun:
    flow_run_id: str
    state: str
    """Final state type: COMPLETED, FAILED, CRASHED or CANCELLED."""
    state_message: str
    api_url: str
    parameters: dict
    messages: list[str] = field(default_factory=list)
    """The flow run's log messages as stored by the API."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds from the start to: server healthy, deployment served, run finished."""
    server_kept: bool = False

    @property
    def completed(self) -> bool:
        return self.state == "COMPLETED"


def api(url: str, path: str, body: dict | None = None, timeout: float = 10.0) -> Any:
    """GET (or POST ``body``) ``<url><path>`` of a Prefect REST API, as JSON."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{url.rstrip('/')}{path}", data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _wait(what: str, fn: Callable[[], Any], timeout: float, logs: list[Path], poll: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(poll)
    tails = "".join(f"\n--- {p} (tail)\n{p.read_text(errors='replace')[-2000:]}" for p in logs if p.exists())
    raise ServerError(f"timed out after {timeout:.0f} s waiting for {what}{tails}")


def deployment_exists(url: str, flow: str, deployment: str) -> bool:
    try:
        return api(url, f"/deployments/name/{flow}/{deployment}").get("name") == deployment
    except Exception:
        return False


def flow_run_logs(url: str, flow_run_id: str, limit: int = 200) -> list[str]:
    rows = api(url, "/logs/filter", {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": limit,
                                      "sort": "TIMESTAMP_ASC"})
    return [r["message"] for r in rows]


def run_deployment(
    flow: str = "render-and-embed",
    parameters: Mapping[str, Any] | None = None,
    deployment: str = "default",
    api_url: str | None = None,
    home: str | Path | None = None,
    keep_server: bool = False,
    timeout: float = 900.0,
    extra_env: Mapping[str, str] | None = None,
    log_dir: str | Path | None = None,
    wait_for_log: str | None = None,
    serve_all: bool = False,
    say: Callable[[str], Any] | None = None,
) -> DeploymentRun:
    """Serve ``flow`` and run its deployment with ``parameters`` via the Prefect CLI.

    ``api_url``: an existing Prefect API (default ``PREFECT_API_URL``, else a local server
    is started). ``wait_for_log``: also wait (up to 30 s) for a log message containing
    this text (logs reach the API in batches, after the final state). ``serve_all``: serve
    every flow's deployment, not only ``flow``'s. ``say``: told each new message of the flow run's
    Running state while it runs (a wait it reports: flows.common.run_notice). Raises ServerError
    when a process fails to come up or a wait times out; a failed run is returned with its
    state (check ``.completed``).
    """
    t0 = time.monotonic()
    home = Path(home) if home else Path(os.environ.get("PREFECT_HOME") or prefect_home())
    log_dir = Path(log_dir) if log_dir else home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    extra = dict(extra_env or {})
    api_url = api_url or os.environ.get("PREFECT_API_URL") or None
    server: LocalServer | None = None
    kept = False
    if api_url is None:
        if keep_server:
            info = start_background(home=home)
            api_url, kept = info["url"], True
        else:
            server = LocalServer(home=home, log_file=log_dir / "server.log", extra_env=extra).start()
            api_url = server.url
    timings = {"server": time.monotonic() - t0}
    env = client_env(api_url, home)
    env.update(extra)
    serve_log = log_dir / f"serve-{flow}.log"
    logs = [serve_log] + ([server.log_file] if server else [])
    serve = None
    try:
        with open(serve_log, "ab") as out:
            which = [] if serve_all else ["--flow", flow]
            serve = subprocess.Popen([sys.executable, "-m", "flows.serve", *which, "--name", deployment],
                                     env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)

        def served():
            if serve.poll() is not None:
                raise ServerError(f"serve process exited with code {serve.returncode}; see {serve_log}")
            return deployment_exists(api_url, flow, deployment)

        _wait(f"deployment {flow}/{deployment}", served, 300, logs)
        timings["served"] = time.monotonic() - t0
        cmd = [sys.executable, "-m", "prefect", "deployment", "run", f"{flow}/{deployment}"]
        for k, v in (parameters or {}).items():
            cmd += ["--param", f"{k}={json.dumps(v)}"]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        m = re.search(r"UUID: ([0-9a-f-]{36})", run.stdout)
        if run.returncode != 0 or not m:
            raise ServerError(f"prefect deployment run failed ({run.returncode}): "
                              + (run.stderr.strip() or run.stdout.strip()).splitlines()[-1][:300])
        flow_run_id = m.group(1)

        told: set[str] = set()

        def finished():
            served()  # a dead serve process would leave the run pending forever
            fr = api(api_url, f"/flow_runs/{flow_run_id}")
            message = fr["state"].get("message") or ""
            if say is not None and fr["state"]["type"] == "RUNNING" and message and message not in told:
                told.add(message)
                say(message)
            return fr if fr["state"]["type"] in FINAL_STATES else None

        fr = _wait(f"flow run {flow_run_id}", finished, timeout, logs)
        timings["finished"] = time.monotonic() - t0
        messages = flow_run_logs(api_url, flow_run_id)
        if wait_for_log:
            try:
                messages = _wait(f"log message {wait_for_log!r}", lambda: (
                    (lambda ms: ms if any(wait_for_log in x for x in ms) else None)(flow_run_logs(api_url, flow_run_id))),
                    30, logs)
            except ServerError:
                pass
        return DeploymentRun(flow_run_id, fr["state"]["type"], fr["state"].get("message") or "", api_url,
                             fr.get("parameters", {}), messages, timings, kept)
    finally:
        if serve is not None:
            kill_group(serve, timeout=15)
        if server is not None:
            server.stop()


def render_and_embed_deployment(cfg: Any = None, keep_server: bool = False, **params: Any) -> tuple[DeploymentRun, dict | None]:
    """The main job through Prefect: ``render-and-embed/default`` on a local server.
    Returns the run and the job's summary (read from the store's last_summary.json;
    None if the run did not complete)."""
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig
    from rmtl.provenance import recorded_path

    cfg = cfg if cfg is not None else RenderAndEmbedConfig.make(**params)  # one-line errors before any start-up
    store = str(Path(cfg.store_path()).resolve()) if "://" not in cfg.store_path() else cfg.store_path()
    parameters = {"config": {**cfg.model_dump(mode="json"), "store": store}}  # the flow's one parameter
    run = run_deployment("render-and-embed", parameters, keep_server=keep_server,
                         wait_for_log="render-and-embed summary",
                         say=lambda line: print(line, file=sys.stderr, flush=True))  # a wait, as the plain command says it
    summary = None
    if run.completed:
        p = Path(store)
        f = p.parent / f"{p.name}.runs" / "last_summary.json"
        if f.exists():
            summary = json.loads(f.read_text())
            # the file records paths portably (rmtl.provenance.portable_path); callers get them absolute
            summary["run_record"] = str(recorded_path(summary["run_record"]))
            summary["cache_files"] = [str(recorded_path(p)) for p in summary["cache_files"]]
            summary["summary_file"] = str(f)
    return run, summary

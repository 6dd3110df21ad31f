"""The render-and-embed flow called directly (no deployment, no server of our own: flows run in this
process report to the session's Prefect server through PREFECT_API_URL)."""

from __future__ import annotations

import inspect
import json

import pytest

from pipeline.jobs.render_and_embed import RenderAndEmbedConfig
from rmtl.errors import ConfigError

TINY = dict(episodes=2, views=["wide_view", "close_up"], resolution=64, model="rmtl-fetch-tiny@random",
            batch_size=32)


def test_flow_parameter_is_the_config():
    from flows.common import flow_parameters
    from flows.render_and_embed import render_and_embed_flow

    sig = inspect.signature(render_and_embed_flow.fn)
    assert list(sig.parameters) == ["config"] and sig.parameters["config"].default == RenderAndEmbedConfig()
    assert json.loads(json.dumps(flow_parameters(RenderAndEmbedConfig()))) == {
        "config": RenderAndEmbedConfig().model_dump(mode="json")}
    assert render_and_embed_flow.name == "render-and-embed"


def test_bad_parameters_fail_with_one_line_before_prefect_starts(capsys):
    from flows.render_and_embed import main, run_render_and_embed

    with pytest.raises(ConfigError) as err:
        run_render_and_embed(episodes=0)
    assert "\n" not in str(err.value) and "episodes" in str(err.value)
    assert main(["--views", "wide_view,nope"]) == 2
    out = capsys.readouterr().err.strip()
    assert out.startswith("error: ") and "nope" in out and "\n" not in out
    assert main(["--stages", "0,x"]) == 2


@pytest.fixture
def prefect_local(prefect_server, tmp_path, monkeypatch):
    """Data dir (and so PREFECT_HOME) in tmp; PREFECT_API_URL the session's Prefect server (no
    temporary server is started); the queued logs and events sent to it before the test ends."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setenv("RMTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PREFECT_HOME", raising=False)
    with temporary_settings(updates={PREFECT_API_URL: prefect_server.url}):
        yield tmp_path
        for worker in (APILogWorker, EventsWorker):
            try:
                worker.drain_all(timeout=10)
            except RuntimeError:  # never started
                pass


@pytest.mark.slow
def test_flow_runs_directly_and_matches_the_pipeline(prefect_local):
    from flows.render_and_embed import render_and_embed_flow, run_render_and_embed
    from flows.prefect_settings import local_settings
    from pipeline.jobs.render_and_embed import format_summary, render_and_embed
    from storage.dataset import DatasetStore

    store = prefect_local / "s.zarr"
    summary = run_render_and_embed(store=str(store), **TINY)
    assert (prefect_local / "data" / "prefect").is_dir()  # PREFECT_HOME under the data dir
    assert summary["rows"] > 0 and summary["episodes_rendered"] == 2
    assert summary["rows_embedded"] == summary["rows"] and summary["model_id"] == "rmtl-fetch-tiny__random"
    assert summary["cache_status"] == "built"
    for p in [*summary["cache_files"], summary["run_record"], summary["summary_file"]]:
        assert (prefect_local / p).exists(), p
    assert "reward quality" in format_summary(summary)
    with DatasetStore.open(store) as ds:
        assert ds.embedded_rows(summary["model_id"]) == ds.num_rows == summary["rows"]

    # the plain pipeline on the same store: nothing left to do, same summary layout
    again = render_and_embed(RenderAndEmbedConfig.make(store=str(store), **TINY), progress=False)
    assert set(again) == set(summary)
    assert again["rows"] == summary["rows"] and again["episodes_rendered"] == 0 and again["rows_embedded"] == 0
    assert again["cache_status"] == "loaded" and again["cache_files"] == summary["cache_files"]

    # a bad value that reaches the flow itself (a deployment run's JSON) fails the run with the
    # config's one-line error
    with local_settings(), pytest.raises(ConfigError, match="cache_kind"):
        render_and_embed_flow({"store": str(store), "cache_kind": "ivf", **TINY})

    # the analysis flows on the same store (same server)
    from flows.analysis import alpha_sweep_flow, bc_labels_flow, per_view_analysis_flow
    from pipeline.analyses.alpha_sweep import AlphaSweepConfig
    from pipeline.analyses.per_view import PerViewConfig

    with local_settings():
        sweep = alpha_sweep_flow(AlphaSweepConfig(store=str(store), alphas=(0.0, 0.5, 1.0)))
        views = per_view_analysis_flow(PerViewConfig(store=str(store), model="rmtl-fetch-tiny@random"))
        bc = bc_labels_flow({"store": str(prefect_local / "bc.zarr"), "episodes": 2, "chunk": 1})
    assert sweep["alphas"] == (0.0, 0.5, 1.0) and sweep["summary"]["rows"] > 0
    for p in [sweep["dataset"], *sweep["plots"].values(), views["dataset"], *views["plots"].values()]:
        assert (prefect_local / p).exists(), p
    assert bc["rows"] > 0 and bc["episodes_rendered"] == 2 and sum(bc["phase_counts"].values()) == bc["rows"]

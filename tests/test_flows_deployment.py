"""Integration: a real Prefect server (the session's), the flows served, and
``prefect deployment run 'render-and-embed/default'`` on tiny parameters."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.slow

MODEL = "rmtl-fetch-tiny@random"
MODEL_ID = "rmtl-fetch-tiny__random"
from conftest import PROCESS_TAG_VAR as TAG_VAR  # noqa: E402
FLOWS = ("render-and-embed", "alpha-sweep", "per-view-analysis", "bc-labels")


def test_render_and_embed_deployment_run(prefect_server, tmp_path, kill_tagged):
    """Server (subprocess, the session's) -> python -m flows.serve (every flow) -> `prefect deployment
    run 'render-and-embed/default' --param ...` -> Completed -> store, embeddings, index. No other test
    serves '<flow>/default' on the session's server."""
    from flows.local import api, run_deployment
    from storage.cache import StateCache
    from storage.dataset import DatasetStore

    tag = uuid.uuid4().hex
    extra = {TAG_VAR: tag, "RMTL_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1",
             "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    server = prefect_server
    store = tmp_path / "stores" / "tiny.zarr"
    # the flow's one parameter; Prefect's CLI checks it against the config's schema (views: a list)
    params = {"config": {"episodes": 2, "views": ["wide_view", "close_up"], "resolution": 64, "model": MODEL,
                         "store": str(store), "batch_size": 32}}
    try:
        run = run_deployment("render-and-embed", params, api_url=server.url, home=tmp_path / "prefect", extra_env=extra,
                             log_dir=tmp_path, timeout=300, wait_for_log="render-and-embed summary", serve_all=True)
        serve_log = (tmp_path / "serve-render-and-embed.log").read_text(errors="replace")[-3000:]
        assert run.completed, (run.state, run.state_message, run.messages[-5:], serve_log)
        assert run.parameters["config"]["episodes"] == 2 and run.parameters["config"]["store"] == str(store)
        assert any("render-and-embed summary" in m and "reward quality" in m for m in run.messages), run.messages
        for flow in FLOWS:  # `python -m flows.serve` served every flow as '<flow>/default'
            assert api(server.url, f"/deployments/name/{flow}/default")["name"] == "default"

        with DatasetStore.open(store) as ds:
            rows = ds.num_rows
            assert rows > 0
            assert sorted(ds.episodes()) == [0, 1]
            assert list(ds.views) == ["wide_view", "close_up"] and ds.resolution == (64, 64)
            assert MODEL_ID in ds.model_ids()
            assert ds.embedded_rows(MODEL_ID) == rows
            assert ds.embeddings(MODEL_ID).shape[:2] == (rows, 2)
            cache = StateCache.open(ds, MODEL_ID, persist=False)
            assert cache.status == "loaded", cache.status  # the persisted index matched the store
            assert cache.index_location.exists() and cache.sidecar_location.exists()
            assert cache.num_indexed == rows
        print(f"\ntimings: deployments served {run.timings['served']:.1f} s, "
              f"flow run completed {run.timings['finished']:.1f} s")
    finally:
        leftovers = kill_tagged(tag)
    assert not leftovers, f"processes left running after shutdown: {leftovers}"

"""Reward-quality queries (pipeline.analyses.query) on a synthetic store (no rendering, no VLM)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rmtl.tasks.fetch_lift.layout import store_description
from rmtl.tasks import get_task

MODEL = "synthetic-model"
VIEWS = ("wide_view", "close_up")


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    """Expert-rollout states with synthetic embeddings; the last episode repeats the first
    (same states, jittered embeddings) so the cache query has exact-key hits."""
    from pipeline.export.bc_labels import bc_label_rows
    from pipeline.jobs.embed import prompt_texts
    from pipeline.jobs.rollout import RolloutConfig
    from storage.dataset import DatasetStore

    rows = bc_label_rows(RolloutConfig.make(episodes=2, stages=(4, 2)), [0, 1])
    dup = {k: v[rows["episode"] == 0].copy() for k, v in rows.items()}
    dup["episode"][:] = 2
    rows = {k: np.concatenate([rows[k], dup[k]]) for k in rows}
    rng = np.random.default_rng(1)
    dim = 16
    text = {t: _unit(rng.normal(size=dim)).astype(np.float32) for t in prompt_texts(get_task().prompts())}
    n = len(rows["episode"])
    emb = _unit(rng.normal(size=(n, len(VIEWS), dim)))
    first = rows["episode"] == 0
    emb[rows["episode"] == 2] = _unit(emb[first] + 1e-3 * rng.normal(size=emb[first].shape))
    path = tmp_path_factory.mktemp("query") / "q.zarr"
    with DatasetStore.create(path, **store_description(), views=VIEWS, resolution=64, frames=False, provenance={"policy": "expert"}) as st:
        st.append(rows)
        st.add_embeddings(MODEL, 0, emb.astype(np.float32))
        st.set_text_embeddings(MODEL, text)
    return path


def test_run_queries_answers_all_questions_and_writes_files(store_path, tmp_path, capsys):
    from pipeline.analyses.query import run_queries

    radii = (0.0, 0.005, 0.05)
    res = run_queries(store_path, MODEL, tmp_path, alpha=0.9, radii=radii, holdout=0.34, seed=3)
    printed = capsys.readouterr().out
    assert "Spearman" in printed and "Flatness" in printed and "Cache hit rate" in printed
    saved = json.loads((tmp_path / "queries.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert saved["rows"] == res["rows"] and saved["policy"] == "expert"
    for name in ("correlation", "flatness", "per_view_variance", "cache"):
        assert Path(res["files"][name]).stat().st_size > 5000
    corr = res["correlation"]
    assert sum(corr[p]["count"] for p in ("approach", "align", "grasp")) == res["rows"]
    assert set(corr["align"]) >= {"approach", "align", "grasp", "count"}
    fl = res["flatness"]["median_over_episodes"]
    assert fl["single"]["range"] >= 0 and fl["micro"]["range"] >= 0
    assert len(res["flatness"]["episodes"]) == 3
    pvv = res["per_view_variance"]
    assert set(pvv) == {*VIEWS, "mean", "disagreement"}
    assert res["quality"]["views"].keys() == set(VIEWS)
    table = res["cache"]["radii"]
    assert [r["radius"] for r in table] == list(radii)
    hit_rates = [r["hit_rate"] for r in table]
    assert hit_rates == sorted(hit_rates)  # a larger radius never hits less
    for r in table:
        assert r["mean_abs_error_all"] <= (r["mean_abs_error_hits"] if r["hit_rate"] > 0 else 0) + 1e-12


def test_cache_query_exact_repeats_hit_at_radius_zero():
    """Held-out rows whose keys are stored exactly hit at radius 0 with the neighbour's score."""
    from pipeline.stores.store_rows import StoreRows
    from pipeline.analyses.query import cache_query

    n = 20
    episode = np.repeat([0, 1], n // 2)
    step = np.tile(np.arange(n // 2), 2)
    keys = np.zeros((n, 11), np.float32)
    keys[:, 0] = np.tile(np.arange(n // 2), 2) * 0.1  # episode 1 revisits episode 0's keys
    scores = np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32)
    rows = StoreRows(rows=np.arange(n), state=np.zeros((n, 25), np.float32), episode=episode, step=step,
                     distance=np.full(n, 0.3), lift=np.zeros(n), phase=np.zeros(n, np.int64))
    res = cache_query(scores, keys, rows, radii=(0.0,), holdout=0.5, seed=0)
    r = res["radii"][0]
    assert r["hit_rate"] == 1.0
    assert r["mean_abs_error_hits"] == pytest.approx(np.abs(scores[:10, 0] - scores[10:, 0]).mean(), rel=1e-5)

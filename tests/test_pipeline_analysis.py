"""Offline analysis steps (pipeline.analyses.alpha_sweep, pipeline.analyses.per_view, pipeline.export.bc_labels): alpha sweep, per-view analysis, BC labels.

The store here is built without rendering or a VLM: states of real expert rollouts
(pipeline.export.bc_labels.bc_label_rows) with synthetic unit embeddings and text embeddings, so
the analysis provably needs nothing but stored embeddings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmtl.errors import StoreError
from rmtl.tasks.fetch_lift.layout import store_description
from rmtl.tasks import get_task

MODEL = "synthetic-model"
VIEWS = ("wide_view", "close_up")


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def build_synthetic_store(path: Path, episodes: int = 3, dim: int = 16, seed: int = 0) -> Path:
    """Expert-rollout states + synthetic embeddings that drift toward each phase's goal."""
    from pipeline.export.bc_labels import bc_label_rows
    from pipeline.jobs.embed import prompt_texts
    from pipeline.jobs.rollout import RolloutConfig
    from rmtl.tasks.fetch_lift.phases import rule_phase
    from rmtl.tasks.fetch_lift.state import gripper_cube_distance
    from storage.dataset import DatasetStore

    rows = bc_label_rows(RolloutConfig.make(episodes=episodes, stages=(4, 2, 0)), list(range(episodes)))
    rng = np.random.default_rng(seed)
    texts = prompt_texts(get_task().prompts())
    text = {t: _unit(rng.normal(size=dim)).astype(np.float32) for t in texts}
    goals = np.stack([text[get_task().prompts().goal("approach")[0]], text[get_task().prompts().goal("align")[0]], text[get_task().prompts().goal("grasp")[0]]])
    dist = np.asarray(gripper_cube_distance(rows["state"]))
    phase = rule_phase(dist)
    n = len(dist)
    closeness = np.clip(1.0 - dist / 0.5, 0, 1)[:, None, None]
    emb = _unit(closeness * goals[phase][:, None, :] + 0.3 * rng.normal(size=(n, len(VIEWS), dim)))
    store = DatasetStore.create(path, **store_description(), views=VIEWS, resolution=64, frames=False, provenance={"policy": "expert"})
    with store:
        store.append(rows)
        store.add_embeddings(MODEL, 0, emb.astype(np.float32))
        store.set_text_embeddings(MODEL, text)
    return path


@pytest.fixture(scope="module")
def synth_store(tmp_path_factory) -> Path:
    return build_synthetic_store(tmp_path_factory.mktemp("analysis") / "synth.zarr")


def test_alpha_sweep_scores_every_alpha_from_stored_embeddings(synth_store, tmp_path):
    from pipeline.analyses.alpha_sweep import alpha_sweep, DEFAULT_ALPHAS
    from pipeline.stores.analysis_dataset import read_dataset
    from pipeline.stores.stored_text import stored_text_embeddings
    from rmtl.tasks.fetch_lift.phases import rule_phase
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.tasks.fetch_lift.state import gripper_cube_distance
    from storage.dataset import DatasetStore

    res = alpha_sweep(synth_store, MODEL, out_dir=tmp_path)
    arrays, attrs = read_dataset(res.dataset)
    n = arrays["row"].shape[0]
    assert np.allclose(arrays["alpha"], DEFAULT_ALPHAS) and len(DEFAULT_ALPHAS) == 11
    assert arrays["active"].shape == (n, 11) and arrays["scores"].shape == (n, 11, 3)
    with DatasetStore.open(synth_store) as st:
        assert attrs["store_uuid"] == st.uuid and attrs["model_id"] == MODEL
        text = stored_text_embeddings(st, MODEL, get_task().prompts())
        rows = [0, n // 2, n - 1]
        emb = st.embeddings(MODEL, rows).astype(np.float32)
        state = st.read(rows, ["state"])["state"]
    phase = rule_phase(np.asarray(gripper_cube_distance(state)))
    for i, a in enumerate(DEFAULT_ALPHAS):
        expect = goal_baseline_scores(emb, text.goals, text.baseline, a).mean(axis=1)
        np.testing.assert_allclose(arrays["scores"][rows, i], expect, atol=1e-6)
        np.testing.assert_allclose(arrays["active"][rows, i], expect[np.arange(3), phase], atol=1e-6)
    assert np.array_equal(arrays["phase"][rows], phase)
    for png in res.plots.values():
        assert Path(png).stat().st_size > 5000
    assert set(res.plots) == {"episode", "state"}
    assert res.episode in set(arrays["episode"].tolist())


def test_per_view_analysis_dataset_is_consistent(synth_store, tmp_path):
    from pipeline.stores.analysis_dataset import read_dataset
    from pipeline.analyses.per_view import per_view_analysis

    res = per_view_analysis(synth_store, MODEL, alpha=0.9, out_dir=tmp_path)
    a, attrs = read_dataset(res.dataset)
    np.testing.assert_allclose(a["mean"], a["per_view"].mean(axis=1), atol=1e-6)
    np.testing.assert_allclose(a["disagreement"], a["per_view"].std(axis=1), atol=1e-6)
    assert a["per_view"].shape[1] == len(VIEWS) and attrs["views"] == list(VIEWS)
    # switches: consecutive steps of one episode whose phase differs, jump = mean difference
    for i, f, t, j in zip(a["switch_index"], a["switch_from"], a["switch_to"], a["switch_jump"]):
        prev = np.flatnonzero((a["episode"] == a["episode"][i]) & (a["step"] == a["step"][i] - 1))[0]
        assert a["phase"][prev] == f and a["phase"][i] == t and f != t
        assert j == pytest.approx(a["mean"][i] - a["mean"][prev], abs=1e-6)
    assert len(a["switch_index"]) > 0
    sv = res.summary["step_variation"]
    # |mean of views' changes| <= mean of |changes|: the mean is never rougher than the average view
    assert sv["mean"] <= np.mean([sv[v] for v in VIEWS]) + 1e-9
    assert set(res.plots) == {"frame", "episodes"} and all(Path(p).stat().st_size > 5000 for p in res.plots.values())
    with pytest.raises(Exception, match="episodes"):
        per_view_analysis(synth_store, MODEL, out_dir=tmp_path, episodes=[999])


def test_bc_labels_store_resumes_without_duplicates(tmp_path):
    from pipeline.export.bc_labels import bc_labels
    from rmtl.tasks.fetch_lift.phases import rule_phase
    from rmtl.tasks.fetch_lift.state import gripper_cube_distance
    from rmtl.train.stage2.bc_data import read_bc_labels
    from storage.dataset import DatasetStore

    path = tmp_path / "bc.zarr"
    first = bc_labels(path, episodes=2, chunk=1, progress=False)
    assert first.episodes_rendered == 2 and not first.resumed
    second = bc_labels(path, episodes=3, chunk=1, progress=False)
    assert second.resumed and second.episodes_rendered == 1 and second.rows > first.rows
    labels = read_bc_labels(path)
    pairs = set(zip(labels["episode"].tolist(), labels["step"].tolist()))
    assert len(pairs) == len(labels["episode"]) == second.rows
    assert sorted(set(labels["episode"].tolist())) == [0, 1, 2]
    # the label is the distance rule (env sites vs state vector agree)
    rule = rule_phase(np.asarray(gripper_cube_distance(labels["state"])))
    assert np.mean(rule == labels["phase_rule"]) > 0.95
    assert sum(second.phase_counts.values()) == second.rows
    with DatasetStore.open(path) as st:
        assert not st.has_frames and st.info["provenance"]["kind"] == "bc_labels"
    with pytest.raises(StoreError, match="different settings"):
        bc_labels(path, episodes=3, policy="random", progress=False)


def test_model_is_resolved_from_id_spec_or_the_only_model(synth_store):
    from pipeline.stores.store_models import resolve_model_id
    from storage.dataset import DatasetStore

    with DatasetStore.open(synth_store) as st:
        assert resolve_model_id(st, None) == MODEL
        assert resolve_model_id(st, MODEL) == MODEL
        with pytest.raises(StoreError, match="no embeddings of 'rmtl-fetch-tiny@random'"):
            resolve_model_id(st, "rmtl-fetch-tiny@random")


def test_a_spec_resolves_to_its_fingerprinted_id_before_a_bare_id_of_the_same_name(tmp_path):
    """Stores written before model ids carried a weights fingerprint hold embeddings of
    the old shipped weights under the bare name; the spec must resolve to the current
    weights' id, never to those."""
    from pipeline.stores.store_models import resolve_model_id
    from rmtl.vlm.spec import parse_spec
    from storage.dataset import DatasetStore

    path = build_synthetic_store(tmp_path / "bare_ids.zarr", episodes=1)
    current = parse_spec("rmtl-fetch-tiny").model_id
    assert current != "rmtl-fetch-tiny"
    with DatasetStore.open(path, mode="a") as st:
        n = st.num_rows
        emb = st.embeddings(MODEL, slice(0, n)).astype(np.float32)
        st.add_embeddings("rmtl-fetch-tiny", 0, emb)
        with pytest.raises(StoreError, match="before model ids named their weights.*re-embed"):
            resolve_model_id(st, "rmtl-fetch-tiny")  # only the bare (unfingerprinted) id is stored
        st.add_embeddings(current, 0, emb)
        assert resolve_model_id(st, "rmtl-fetch-tiny") == current
        assert resolve_model_id(st, current) == current

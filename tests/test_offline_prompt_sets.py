"""A new prompt set answered from stored embeddings, and the store exported to Minari.

One small real store (2 episodes, 2 views at 64 px: a noise-free expert that succeeds
and a near-random one that fails), rendered and embedded once with the shipped
``rmtl-fetch-tiny`` and the random-weight comparison model. Then, with the image tower
and the renderer patched to fail (and the frame reader, except for the thumbnails of the
per-view plot): ``rmtl embed-text`` stores a new
set's text embeddings, and ``prompt-study``, ``query``, ``alpha-sweep``,
``per-view-analysis`` and ``reward-quality`` answer for it (pipeline.jobs.embed_text,
pipeline.analyses.prompt_study). The Minari export is loaded back with the real ``minari``
package and checked against the store (pipeline.export.minari_export).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rmtl.cli import run
from rmtl.tasks import get_task

VIEWS = ("wide_view", "close_up")
MODEL = "rmtl-fetch-tiny"
NEW_SET = """name: fresh
description: wording no stored text has
baseline: a red block and a robot hand on a tabletop
goals:
  approach: a robot hand with open fingers hovering over a red block
  align: robot fingers closing on a red block
  grasp: a robot hand raising a red block from the tabletop
paraphrases:
  grasp: [a red block held up by a robot hand]
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory, random_tiny_vlm):
    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig

    path = tmp_path_factory.mktemp("offline") / "s.zarr"
    cfg = RolloutConfig.make(episodes=2, views=VIEWS, resolution=64, stages=(0,), noise_levels=(0.0, 1.0))
    render_to_store(path, cfg, progress=False)
    embed_store(path, MODEL, progress=False, device="cpu")
    embed_store(path, random_tiny_vlm, progress=False)
    return path


@pytest.fixture(scope="module")
def sets_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("sets")
    (d / "fresh.yaml").write_text(NEW_SET)
    for name in ("paper", "single"):
        shutil.copy(f"rmtl/reward/prompt_sets/{name}.yaml", d / f"{name}.yaml")
    return d


@pytest.fixture
def no_image_model(monkeypatch):
    """Any image-tower call or render fails the test, and so does a frame read unless
    ``allow["frames"]`` (the per-view plot shows stored frames as thumbnails)."""
    from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv
    from rmtl.vlm.model import VLM
    from storage.dataset import DatasetStore

    def boom(*a, **k):
        raise AssertionError("the image tower, a frame read or the renderer was used")

    for name in ("forward_images", "encode_images", "preprocess_frames"):
        monkeypatch.setattr(VLM, name, boom)
    monkeypatch.setattr(FetchPickAndLiftEnv, "render_views", boom)
    read = DatasetStore.read
    allow = {"frames": False}

    def read_no_frames(self, rows=None, fields=None, views=None):
        if fields is not None and "frames" in fields and not allow["frames"]:
            boom()
        return read(self, rows, fields, views)

    monkeypatch.setattr(DatasetStore, "read", read_no_frames)
    return allow


def test_a_new_prompt_set_is_answered_without_the_image_tower(store, sets_dir, tmp_path, no_image_model, capsys):
    from pipeline.stores.stored_text import prompt_set_text
    from rmtl.reward.prompt_sets import load_prompt_set
    from rmtl.vlm.spec import parse_spec
    from storage.dataset import DatasetStore

    fresh = sets_dir / "fresh.yaml"
    pset = load_prompt_set(fresh).for_task(get_task().micro_tasks)  # the single goal: the task's
    mid = parse_spec(MODEL).model_id
    with DatasetStore.open(store, "r") as st:
        with pytest.raises(Exception, match=r"rmtl embed-text --store .* --prompts .*fresh.yaml"):
            prompt_set_text(st, mid, pset)
    for model in (MODEL, "rmtl-fetch-tiny@random"):
        assert run(["embed-text", "--store", str(store), "--prompts", str(sets_dir), "--model", model]) == 0
    with DatasetStore.open(store, "r") as st:
        assert pset.id in st.prompt_set_ids(mid)
        rec = st.prompt_set_embeddings(mid, pset.id)
        assert rec["roles"] == [r for r, _ in pset.rows()] and rec["texts"] == [t for _, t in pset.rows()]
        assert rec["prompt_set"]["name"] == "fresh" and rec["embeddings"].shape[0] == 6
        text = prompt_set_text(st, mid, pset)
    assert text.goals.shape[0] == 3
    out = tmp_path / "study"
    assert run(["prompt-study", "--store", str(store), "--prompts", str(sets_dir), "--model", MODEL,
                "--out", str(out)]) == 0
    study = json.loads((out / "prompt_study.json").read_text())
    assert [r["rank"] for r in study["sets"]] == [1, 2, 3] and (out / "prompt_study.png").stat().st_size > 0
    assert {r["name"] for r in study["sets"]} == {"fresh", "paper", "single"}
    assert study["episodes"] == 2 and study["successes"] == 1
    for args in (["query", "--radii", "0,0.01"], ["alpha-sweep", "--alphas", "0.5,0.9"], ["per-view-analysis"]):
        no_image_model["frames"] = args[0] == "per-view-analysis"
        assert run([*args, "--store", str(store), "--model", MODEL, "--prompts", str(fresh),
                    "--out", str(tmp_path / args[0])]) == 0, args
    q = json.loads((tmp_path / "query" / "queries.json").read_text())
    assert q["prompts"]["id"] == pset.id
    assert run(["reward-quality", "--store", str(store), "--model", MODEL, "--prompts", str(fresh),
                "--out", str(tmp_path / "rq.json")]) == 0
    capsys.readouterr()


def test_prompt_study_metrics_are_the_quality_metrics(store, sets_dir, tmp_path):
    """The paper set's within-phase ranks equal rmtl.tasks.fetch_lift.quality's on the same rows, and the
    single prompt is its own flatness reference."""
    from pipeline.jobs.embed_text import embed_text
    from pipeline.analyses.prompt_study import prompt_study
    from pipeline.jobs.render_and_embed import quality_summary
    from rmtl.reward.prompt_sets import load_prompt_sets

    embed_text(store, load_prompt_sets(sets_dir), MODEL)
    res = prompt_study(store, sets_dir, MODEL, out_dir=tmp_path, show=False, plots=False)
    by = {r["name"]: r["metrics"] for r in res["sets"]}
    q = quality_summary(str(store), MODEL)["mean"]
    for key in ("approach_spearman", "align_spearman", "grasp_auc", "right_prompt_accuracy", "approach_spread"):
        assert by["paper"][key] == pytest.approx(q[key], nan_ok=True), key
    assert by["single"]["range_ratio_over_single"] == 1.0 and by["single"]["right_prompt_accuracy"] != \
        by["single"]["right_prompt_accuracy"]  # NaN: one goal cannot pick a prompt
    assert 0.0 <= by["paper"]["auc_mean_reward"] <= 1.0
    assert res["seconds"]["total"] < 30


def test_one_line_errors(store, sets_dir, tmp_path, capsys):
    from pipeline.jobs.embed_text import embed_text
    from rmtl.errors import ModelLoadError
    from rmtl.reward.prompt_sets import load_prompt_set
    from rmtl.vlm import load_vlm

    bad = tmp_path / "bad.yaml"
    bad.write_text("baseline: a table\ngoals: {approach: x, grasp: z}\n")
    for args in (["embed-text", "--store", str(store), "--prompts", str(bad)],
                 ["prompt-study", "--store", str(store), "--prompts", str(bad), "--model", MODEL],
                 ["query", "--store", str(store), "--model", MODEL, "--prompts", str(bad)]):
        capsys.readouterr()
        assert run(args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "misses a goal for the micro-task 'align'" in err, args
    bad.write_text("baseline: [a table\n")
    assert run(["embed-text", "--store", str(store), "--prompts", str(bad)]) == 2
    assert "is not valid YAML at line" in capsys.readouterr().err
    old = tmp_path / "v1.zarr"  # a store made before actions were recorded
    shutil.copytree(store, old)
    _as_schema_v1(old)
    assert run(["export", "minari", str(old), "--name", "old"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "schema v1" in err and "no actions" in err
    vlm = load_vlm(MODEL, device="cpu")
    vlm.model.transformer = None  # an image-only model: no text tower loaded
    with pytest.raises(ModelLoadError, match="has no text tower loaded"):
        embed_text(store, [load_prompt_set("paper")], vlm)


def _as_schema_v1(path) -> None:
    from conftest import as_schema_v1

    as_schema_v1(path)


def test_minari_export_loads_back_with_the_stores_values(store, tmp_path, monkeypatch):
    import minari

    from pipeline.export.minari_export import export_minari
    from storage.dataset import DatasetStore

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    assert run(["export", "minari", str(store), "--prompts", "paper", "--name", "test-vlm", "--model", MODEL]) == 0
    ds = minari.load_dataset("rmtl/test-vlm-v0")
    with DatasetStore.open(store, "r") as st:
        cols = st.read(fields=["state", "episode", "step", "action", "terminated", "truncated", "phase_rule"])
    n_rows = len(cols["episode"])
    assert ds.total_episodes == 2 and ds.total_steps == n_rows - 2
    episodes = list(ds.iterate_episodes())
    for e, ep in enumerate(episodes):
        rows = np.flatnonzero(cols["episode"] == e)
        np.testing.assert_allclose(ep.observations["observation"], cols["state"][rows], rtol=0, atol=0)
        np.testing.assert_array_equal(ep.actions, cols["action"][rows[1:]])
        np.testing.assert_array_equal(ep.terminations, cols["terminated"][rows[1:]])
        np.testing.assert_array_equal(ep.truncations, cols["truncated"][rows[1:]])
        np.testing.assert_array_equal(ep.infos["bc_label"], cols["phase_rule"][rows])
        assert ep.infos["store_row"].tolist() == rows.tolist() and np.isfinite(ep.infos["vlm_score"]).all()
        assert (ep.rewards <= 1.0).all() and (ep.rewards >= -1.0).all()
    success = [bool(ep.terminations[-1]) for ep in episodes]
    assert success == [True, False]
    assert episodes[0].rewards[-1] >= 0.0  # the +1 success bonus on the terminal step
    env = ds.recover_environment()
    assert env.observation_space.contains({k: v[0] for k, v in episodes[0].observations.items()})
    env.close()
    dense = export_minari(store, "test-dense", reward="dense", model=MODEL)
    assert dense["episodes"] == 2 and dense["steps"] == n_rows - 2 and dense["model_id"] is not None
    with pytest.raises(Exception, match="already exists"):
        export_minari(store, "test-dense", reward="dense", model=MODEL)


def test_bc_labels_write_a_minari_dataset(tmp_path, monkeypatch):
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    assert run(["bc-labels", "--out", str(tmp_path / "bc.zarr"), "--episodes", "2", "--minari", "bc-test"]) == 0
    ds = minari.load_dataset("rmtl/bc-test-v0")
    ep = next(ds.iterate_episodes())
    assert ds.total_episodes == 2 and np.isnan(ep.infos["vlm_score"]).all()
    assert set(np.unique(ep.infos["bc_label"])) <= {0, 1, 2}


def test_vectorised_episode_flatness_equals_the_query():
    from types import SimpleNamespace

    from pipeline.analyses.prompt_study import episode_flatness
    from pipeline.analyses.query import flatness_query

    rng = np.random.default_rng(1)
    n = 300
    episode = np.sort(rng.integers(0, 12, n))
    step = np.concatenate([np.arange((episode == e).sum()) for e in np.unique(episode)])
    perm = rng.permutation(n)  # rows in any order
    rows = SimpleNamespace(episode=episode[perm], step=step[perm], distance=np.round(rng.uniform(0, 0.3, n), 2)[perm])
    rows.episode_ids = lambda: [int(e) for e in np.unique(rows.episode)]
    rows.episode_index = lambda e: (lambda i: i[np.argsort(rows.step[i])])(np.flatnonzero(rows.episode == e))
    for x in (rng.normal(size=n), np.round(rng.normal(size=n), 1), -rows.distance):
        want = flatness_query(x, x, rows)["median_over_episodes"]["micro"]
        got = episode_flatness(x, rows)
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-9, nan_ok=True), key

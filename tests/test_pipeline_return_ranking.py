"""The offline return-ranking query and the off-expert gate set on a small real store:
noisy experts (noise 0 and 1) rendered from all six views and embedded with the shipped
rmtl-fetch-tiny (a random-weight model scores every state alike, so every shaped reward
would be 0 and the checks below could not fail) and with the random-weight fixture (the
comparison model of the quality report); a dense-reward checkpoint rolled out
(pipeline.analyses.return_ranking, pipeline.jobs.gate_set)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from pipeline.jobs.rollout import RolloutConfig, plan_episode, rollout_episodes
from rmtl.tasks.fetch_lift.cameras import VIEW_NAMES
from rmtl.errors import ConfigError, StoreError
from rmtl.tasks import get_task

EPISODES = 6
MODEL = "rmtl-fetch-tiny"


@pytest.fixture(scope="module")
def store(tmp_path_factory, random_tiny_vlm):
    """6 episodes of every view, embedded by two models (half a minute on 2 cores: its tests are slow)."""
    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render import render_to_store

    path = tmp_path_factory.mktemp("rank") / "s.zarr"
    # noise 0 succeeds at stage 0, noise 1 (about random actions) fails: both classes present
    cfg = RolloutConfig.make(episodes=EPISODES, views=VIEW_NAMES, resolution=64, stages=(0,), noise_levels=(0.0, 1.0))
    render_to_store(path, cfg, progress=False)
    embed_store(path, MODEL, progress=False, device="cpu")
    embed_store(path, random_tiny_vlm, progress=False)
    return path


@pytest.fixture(scope="module")
def ranking(store, tmp_path_factory):
    from pipeline.analyses.return_ranking import return_ranking

    return return_ranking(store, MODEL, out_dir=tmp_path_factory.mktemp("out"), show=False)


@pytest.fixture(scope="module")
def ranking_running(store, tmp_path_factory):
    from pipeline.analyses.return_ranking import return_ranking

    return return_ranking(store, MODEL, out_dir=tmp_path_factory.mktemp("out"), bounds="running", show=False)


def test_noise_levels_cycle_over_stages():
    cfg = RolloutConfig.make(episodes=8, stages=(0, 4), noise_levels=(0.1, 0.5, 1.0))
    assert [plan_episode(cfg, e).noise_std for e in range(8)] == [0.1, 0.1, 0.5, 0.5, 1.0, 1.0, 0.1, 0.1]
    assert [plan_episode(RolloutConfig.make(noise_std=0.2, stages=(0,)), e).noise_std for e in range(3)] == [0.2, 0.4, 0.2]


@pytest.mark.slow
def test_store_resume_refuses_other_noise_levels(store):
    from pipeline.jobs.render import render_to_store

    cfg = RolloutConfig.make(episodes=EPISODES, views=VIEW_NAMES, resolution=64, stages=(0,), noise_levels=(0.0, 0.5))
    with pytest.raises(StoreError, match="noise_levels"):
        render_to_store(store, cfg, progress=False)


@pytest.mark.slow
def test_return_ranking_table(ranking):
    assert ranking["bounds"] == "adapted"
    names = [r["variant"] for r in ranking["variants"]]
    assert names == ["rmtl", "single_prompt_multi_view", "single_prompt_single_view", "single_prompt_banded",
                     "rmtl_per_phase", "length_only", "dense_reference"]
    assert ranking["episodes"] == EPISODES and 0 < ranking["successes"] < EPISODES
    for r in ranking["variants"]:
        assert 0.0 <= r["auc_return"] <= 1.0 and 0.0 <= r["auc_mean_reward"] <= 1.0
    # Successful episodes end early: episode length alone ranks them (the scale of every AUC).
    length_only = next(r for r in ranking["variants"] if r["variant"] == "length_only")
    assert length_only["auc_return"] == pytest.approx(1.0)


@pytest.mark.slow
def test_returns_are_the_real_shaper_over_stored_scores_in_step_order(store, ranking_running):
    """Recomputed here from the stored embeddings: reward steps only, rule phase, one env
    shaper fed the episodes in id order (bounds carried over from 0.45/0.70, history reset)."""
    from pipeline.stores.stored_text import stored_text_embeddings
    from rmtl.tasks.fetch_lift.phases import rule_phase
    from rmtl.reward import RewardShaper, ShapingConfig, score_embeddings
    from rmtl.tasks.fetch_lift.state import gripper_cube_distance
    from storage.dataset import DatasetStore

    from rmtl.vlm.spec import parse_spec

    with open(ranking_running["files"]["episodes_csv"]) as f:
        table = list(csv.DictReader(f))
    with DatasetStore.open(store, "r") as st:
        mid = parse_spec(MODEL).model_id
        cols = st.read(fields=["state", "episode", "step", "success"])
        emb = st.embeddings(mid)
        multi = stored_text_embeddings(st, mid, get_task().prompts())
        single = stored_text_embeddings(st, mid, get_task().prompts(), single_prompt=True)
    phase = rule_phase(gripper_cube_distance(cols["state"]))
    micro = score_embeddings(emb, multi, 0.9, stored_views=VIEW_NAMES).aggregate
    one = score_embeddings(emb, single, 0.9, views=("wide_view",), stored_views=VIEW_NAMES).aggregate[:, 0]
    assert micro.shape[1] == 3
    expect = {"rmtl": [], "rmtl_per_phase": [], "single_prompt_single_view": []}
    per_phase = ShapingConfig(band=False, bounds="widen_only", trend=True, momentum=True, drop_penalty=True)
    shapers = {"rmtl": RewardShaper(1, num_phases=3), "rmtl_per_phase": RewardShaper(1, per_phase, num_phases=3),
               "single_prompt_single_view": RewardShaper(1, num_phases=1)}
    for e in sorted(set(cols["episode"].tolist())):
        idx = np.flatnonzero((cols["episode"] == e) & (cols["step"] >= 1))
        idx = idx[np.argsort(cols["step"][idx])]
        for name, sh in shapers.items():
            sh.reset()  # bounds carry over
            total = 0.0
            for i in idx:
                s = one[i] if name.startswith("single") else micro[i, phase[i]]
                total += sh(np.array([s]), np.array([phase[i]])).reward[0]
            expect[name].append(total)
        row = table[len(expect["rmtl"]) - 1]
        assert int(row["episode"]) == e and int(row["length"]) == len(idx)
        assert bool(int(row["success"])) == bool(cols["success"][cols["episode"] == e].any())
    for name, values in expect.items():
        np.testing.assert_allclose([float(r[name]) for r in table], values, atol=1e-4)
    assert np.ptp(expect["rmtl"]) > 0.05  # the returns do differ between episodes
    # The band (k + u)/3 - 1 against the per-phase u - 1: they change the returns.
    assert not np.allclose(expect["rmtl"], expect["rmtl_per_phase"])


def test_adapted_bounds_are_the_limit_of_the_running_bounds():
    """Level only (u - 1): with adapted bounds each phase's u spans [min(0.45, lowest), max(0.70, highest)]."""
    from rmtl.reward.replay import shaped_rewards
    from rmtl.reward import ShapingConfig

    rng = np.random.default_rng(0)
    active, phases = rng.uniform(0.3, 0.95, 60), rng.integers(0, 3, 60)
    episodes = [np.arange(i, i + 10) for i in range(0, 60, 10)]
    level = ShapingConfig(trend=False, momentum=False, band=False, bounds="widen_only")
    r = shaped_rewards(active, phases, episodes, level, 3, "adapted")
    for p in range(3):
        m = phases == p
        lo, hi = min(0.45, active[m].min()), max(0.70, active[m].max())
        np.testing.assert_allclose(r[m], (active[m] - lo) / (hi - lo) - 1, atol=1e-6)
    running = shaped_rewards(active, phases, episodes, level, 3, "running")
    assert not np.allclose(r, running)


@pytest.mark.slow
def test_single_prompt_returns_ignore_the_phases(store):
    from pipeline.analyses.return_ranking import variant_rewards
    from pipeline.stores.store_rows import load_rows
    from storage.dataset import DatasetStore

    from rmtl.vlm.spec import parse_spec

    with DatasetStore.open(store, "r") as st:
        mid = parse_spec(MODEL).model_id
        labels = load_rows(st, mid)
        keep = labels.step >= 1
        rows, phase, ep = labels.rows[keep], labels.phase[keep], labels.episode[keep]
        episodes = [np.flatnonzero(ep == e) for e in np.unique(ep)]
        shuffled = np.random.default_rng(0).integers(0, 3, size=len(phase))
        for variant, invariant in (("single_prompt_multi_view", True), ("rmtl", False)):
            a = variant_rewards(st, mid, rows, phase, episodes, variant)
            b = variant_rewards(st, mid, rows, shuffled, episodes, variant)
            assert np.array_equal(a, b) == invariant


@pytest.mark.slow
def test_grouped_quality_splits_by_noise_level(store):
    from pipeline.jobs.gate_set import group_table, grouped_quality

    groups = grouped_quality(str(store), MODEL)
    assert list(groups) == ["expert noise 0", "expert noise 1"]
    assert [g["episodes"] for g in groups.values()] == [EPISODES // 2, EPISODES // 2]
    assert {"approach_spearman", "align_spearman", "grasp_auc"} <= set(groups["expert noise 1"]["mean"])
    assert group_table(str(store), groups, "m").row_count == 2


@pytest.mark.slow
def test_checkpoint_rollouts_are_seeded_and_labelled(tiny_dense_run, tmp_path):
    from pipeline.jobs.gate_set import gate_set_configs
    from pipeline.jobs.rollout import policy_label

    ck = tiny_dense_run / "checkpoints" / "step_000000128" / "model.zip"
    cfg = RolloutConfig.make(episodes=2, policy=str(ck), views=("wide_view",), resolution=64, stages=(0,))
    a, b = rollout_episodes(cfg, [1], render=False), rollout_episodes(cfg, [0, 1], render=False)
    np.testing.assert_array_equal(a["state"], b["state"][b["episode"] == 1])  # sampled, yet per-episode seeded
    assert policy_label(cfg, plan_episode(cfg, 0)) == "checkpoint step_000000128"
    det = cfg.replace(deterministic=True)
    np.testing.assert_array_equal(rollout_episodes(det, [0], render=False)["state"],
                                  rollout_episodes(det.replace(seed=cfg.seed), [0], render=False)["state"])
    configs = gate_set_configs(tmp_path, checkpoints=[tiny_dense_run], noise_levels=(0.1, 1.0), episodes=3)
    assert [c.store_path() for c in configs] == [str(tmp_path / "noisy_expert.zarr"), str(tmp_path / "run_step_000000128.zarr")]
    assert configs[0].noise_levels == (0.1, 1.0) and configs[1].policy == str(ck)


@pytest.mark.slow
def test_cli_return_ranking_and_gate_set(store, tiny_dense_run, tmp_path, capsys):
    from rmtl.cli import run

    assert run(["return-ranking", "--store", str(store), "--model", MODEL, "--variants",
                "rmtl,single_prompt_multi_view", "--out", str(tmp_path / "rr")]) == 0
    saved = json.loads((tmp_path / "rr" / "return_ranking.json").read_text())
    assert [v["variant"] for v in saved["variants"]][:2] == ["rmtl", "single_prompt_multi_view"]
    capsys.readouterr()
    assert run(["gate-set", "--out", str(tmp_path / "gates"), "--checkpoint", str(tiny_dense_run),
                "--noise-levels", "0.0", "--episodes", "1", "--resolution", "64", "--against", "none"]) == 0
    output = capsys.readouterr().out
    # The tables wrap at the console's width: check the stores they were computed from instead.
    from pipeline.jobs.gate_set import grouped_quality

    for name, source in (("noisy_expert", "expert noise 0"), ("run_step_000000128", "checkpoint step_000000128")):
        assert f"wrote {tmp_path / 'gates' / name}.zarr" in output.replace("\n", "")
        assert list(grouped_quality(str(tmp_path / "gates" / f"{name}.zarr"), MODEL)) == [source]
    # The checkpoint's rollouts diagnosed against the noisy experts.
    assert run(["diagnose-rollouts", "--store", str(tmp_path / "gates" / "run_step_000000128.zarr"),
                "--reference", str(store), "--model", MODEL, "--variants", "rmtl", "--episodes", "1",
                "--out", str(tmp_path / "diag")]) == 0
    assert "hacking:" in capsys.readouterr().out and (tmp_path / "diag" / "montage.png").is_file()
    assert run(["diagnose-rollouts", "--store", str(store), "--model", MODEL, "--variants", "dense_reference"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no VLM reward" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("shaping_kw, num_phases", [({}, 3), ({"band": False, "bounds": "widen_only", "trend": True, "momentum": True}, 3), ({}, 1),
                                                    ({"bounds": "widen_only", "reset_bounds_on_episode": True}, 3)])
def test_lockstep_shaping_equals_one_episode_after_another(shaping_kw, num_phases):
    """shaped_rewards steps independent episodes in lockstep; the rewards are those of one
    shaper env fed the episodes one after another (bounds set once, history reset)."""
    from rmtl.reward.replay import adapted_bounds, offline_shaping, shaped_rewards
    from rmtl.reward import RewardShaper, ShapingConfig

    rng = np.random.default_rng(3)
    lengths = [1, 7, 40, 12, 0, 25]
    n = sum(lengths)
    active = rng.uniform(0.3, 0.95, n)
    phases = rng.integers(0, num_phases, n)
    order = rng.permutation(n)
    episodes, start = [], 0
    for L in lengths:
        episodes.append(order[start:start + L])
        start += L
    shaping = ShapingConfig(**shaping_kw)
    shaper = RewardShaper(1, offline_shaping(shaping, "adapted"), num_phases=num_phases)
    for p, (lo, hi) in adapted_bounds(active, phases, shaping, num_phases).items():
        shaper.low[0, p], shaper.high[0, p] = lo, hi
    expect = np.zeros(n)
    for idx in episodes:
        shaper.reset()
        for i in idx:
            expect[i] = shaper(active[i:i + 1], phases[i:i + 1]).reward[0]
    np.testing.assert_array_equal(shaped_rewards(active, phases, episodes, shaping, num_phases, "adapted"), expect)


@pytest.mark.slow
def test_rollout_diagnosis_follows_the_shaper_and_writes_its_plots(store, ranking, tmp_path):
    from PIL import Image

    from pipeline.analyses.rollout_diagnosis import diagnose_rollouts

    res = diagnose_rollouts(store, None, MODEL, ("rmtl", "single_prompt_multi_view"), out_dir=tmp_path / "a",
                            montage_episodes=2, show=False)
    with open(tmp_path / "a" / "steps.csv") as f:
        steps = list(csv.DictReader(f))
    assert len(steps) == res["policy"]["reward_steps"] == ranking["reward_steps"]
    # Alone, the store's own adapted bounds: the per-episode sums are return-ranking's returns.
    with open(ranking["files"]["episodes_csv"]) as f:
        ranked = {int(r["episode"]): float(r["rmtl"]) for r in csv.DictReader(f)}
    sums: dict[int, float] = {}
    for r in steps:
        sums[int(r["episode"])] = sums.get(int(r["episode"]), 0.0) + float(r["vlm_reward"])
    assert sums.keys() == ranked.keys()
    np.testing.assert_allclose([sums[e] for e in ranked], list(ranked.values()), atol=1e-3)
    assert set(res["policy"]["mean_return"]) == {"rmtl", "single_prompt_multi_view", "dense_reference"}
    assert sum(p["fraction"] for p in res["policy"]["phases"].values()) == pytest.approx(1.0)
    assert Image.open(res["files"]["montage.png"]).size[0] == 6 * 64  # six steps of one view per episode
    for name in ("traces.png", "reward_scatter.png"):
        assert Image.open(res["files"][name]).size[0] > 300

    # Against itself as the reference: paid the same, not worse, so no hacking, no preference.
    same = diagnose_rollouts(store, store, MODEL, ("rmtl",), out_dir=tmp_path / "b", montage_episodes=1, show=False)
    assert same["verdict"]["hacking"] is False and same["verdict"]["return_prefers_policy"] == {"rmtl": False,
                                                                                                "dense_reference": False}
    assert json.loads((tmp_path / "b" / "diagnosis.json").read_text())["verdict"] == same["verdict"]
    with pytest.raises(ConfigError, match="montage view 'top'"):  # checked before any work
        diagnose_rollouts(store, None, MODEL, ("rmtl",), out_dir=tmp_path / "c", montage_view="top", show=False)
    assert not (tmp_path / "c").exists()


def test_discounted_returns_add_the_success_bonus_on_the_last_step():
    from pipeline.analyses.rollout_diagnosis import _discounted

    p = {"episodes": [np.array([0, 1]), np.array([2])], "success": np.array([True, False])}
    r = np.array([-0.5, -0.25, -1.0])
    np.testing.assert_allclose(_discounted(p, r, 0.5, True), [-0.5 + 0.5 * 0.75, -1.0])
    np.testing.assert_allclose(_discounted(p, r, 0.5, False), [-0.5 - 0.125, -1.0])

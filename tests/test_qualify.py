"""``rmtl qualify`` at CI size: the metrics follow the scorer, the verdict follows the map, and the
command runs for a state kind and for a VLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.qualify import (MAP_VERSION, LearnabilityMap, load_families, map_support, map_verdict, qualify, scorer_metrics,
                              scorer_verdict, state_scorer, state_set)
from rmtl.errors import ConfigError
from rmtl.tasks import get_task

REPO = Path(__file__).resolve().parents[1]

TASK = get_task("fetch_lift")


@pytest.fixture(scope="module")
def families_file(tmp_path_factory) -> Path:
    """Three short families: the noise-free expert, a noisy one and sit-at-cube."""
    spec = {"task": "fetch_lift", "seed": 123,
            "families": {"expert": {"group": "expert", "policy": "expert", "noise_levels": [0.0], "episodes": 3,
                                    "stages": [0, 2, 4]},
                         "noisy": {"group": "noisy_expert", "policy": "expert", "noise_levels": [0.3], "episodes": 2,
                                   "stages": [2, 4]},
                         "sit": {"group": "behaviour", "policy": "behaviour:sit_at_cube", "noise_std": 0.0,
                                 "episodes": 1, "stages": [4]}}}
    p = tmp_path_factory.mktemp("qual") / "families.yaml"
    p.write_text(yaml.safe_dump(spec))
    return p


@pytest.fixture(scope="module")
def rows(families_file, tmp_path_factory):
    task, fams = load_families(families_file)
    return state_set(task, fams, tmp_path_factory.mktemp("states"), progress=False)


def test_the_oracle_ranks_perfectly_and_zero_error_equals_it(rows):
    oracle, _ = state_scorer(TASK, {"kind": "oracle"})
    exact = scorer_metrics(TASK, oracle.scores(rows.states), rows)
    # approach progress is toward a point above the cube; the rank is against the distance to the cube
    assert exact["approach_rank"] > 0.8 and exact["align_rank"] > 0.95 and exact["grasp_auc"] == 1.0
    zero, _ = state_scorer(TASK, {"kind": "degraded_oracle"})
    assert scorer_metrics(TASK, zero.scores(rows.states), rows) == exact


def test_errors_lower_the_metrics_they_target(rows):
    oracle, _ = state_scorer(TASK, {"kind": "oracle"})
    exact = scorer_metrics(TASK, oracle.scores(rows.states), rows)
    smooth, _ = state_scorer(TASK, {"kind": "degraded_oracle", "error": {"default": {"systematic": 1.5}}}, seed=1)
    bad = scorer_metrics(TASK, smooth.scores(rows.states), rows)
    assert bad["align_rank"] + bad["approach_rank"] < exact["align_rank"] + exact["approach_rank"] - 0.6
    resting, _ = state_scorer(TASK, {"kind": "degraded_oracle", "error": {"confusions": {"grasp_resting": 1.0}}})
    paid = scorer_metrics(TASK, resting.scores(rows.states), rows)
    assert paid["resting_grasp_pay"] > exact["resting_grasp_pay"] + 0.5
    assert paid["approach_rank"] == exact["approach_rank"]


def test_a_vlm_kind_is_refused_as_a_state_scorer():
    with pytest.raises(ConfigError, match="--model"):
        state_scorer(TASK, {"kind": "vlm"})


BETTER = {"grasp_auc": 1, "approach_rank": 1}


def _fitted_map(**changes) -> LearnabilityMap:
    axes = ["grasp_auc", "approach_rank"]
    return LearnabilityMap.make(**{
        "version": MAP_VERSION, "fitted": True, "axes": axes, "better": BETTER, "teaches_at": 0.5,
        "mean": [0.8, 0.5], "scale": [0.1, 0.3], "coef": [3.0, 0.5], "intercept": 0.0,
        "bootstrap_coef": [[2.5, 0.4], [3.5, 0.6]], "bootstrap_intercept": [-0.2, 0.2],
        "conditions": [{"name": "good", "metrics": {"grasp_auc": 1.0, "approach_rank": 0.9}, "outcomes": [0.9, 0.8]},
                       {"name": "bad", "metrics": {"grasp_auc": 0.6, "approach_rank": 0.9}, "outcomes": [0.0, 0.02]},
                       {"name": "mid", "metrics": {"grasp_auc": 0.8, "approach_rank": 0.5}, "outcomes": [0.9, 0.0]}],
        **changes})


def test_the_verdict_follows_the_map():
    m = _fitted_map()
    assert map_verdict({"grasp_auc": 0.99, "approach_rank": 0.9}, m)["verdict"] == "teaches"
    low = map_verdict({"grasp_auc": 0.55, "approach_rank": 0.9}, m)
    assert low["verdict"] == "does not teach" and low["nearest_conditions"][0] == "bad"
    assert map_verdict({"grasp_auc": 0.8, "approach_rank": 0.5}, m)["verdict"] == "uncertain"
    assert map_verdict({"grasp_auc": 0.9}, None)["verdict"] == "unmapped"
    # A "teaches" on an axis worse than every run that taught rests on extrapolation: held at "uncertain".
    support = map_support([({"grasp_auc": 0.95, "approach_rank": 0.2}, 0.9), ({"grasp_auc": 0.9, "approach_rank": 0.6}, 0.8),
                           ({"grasp_auc": 0.5, "approach_rank": -0.9}, 0.0)], 0.5, BETTER)
    assert support == {"grasp_auc": 0.9, "approach_rank": 0.2}
    m = _fitted_map(support=support)
    assert map_verdict({"grasp_auc": 0.99, "approach_rank": 0.9}, m)["verdict"] == "teaches"
    beyond = map_verdict({"grasp_auc": 0.99, "approach_rank": -0.5}, m)
    assert beyond["verdict"] == "uncertain" and beyond["p_teaches"] > 0.9 and "approach_rank -0.50" in beyond["why"]
    assert map_verdict({"grasp_auc": 0.55, "approach_rank": 0.9}, m)["verdict"] == "does not teach"
    # A degenerate behaviour that earns the expert's return holds a "teaches" at "uncertain".
    held = scorer_verdict({"grasp_auc": 0.99, "approach_rank": 0.9}, ["sit"], m)
    assert held["verdict"] == "uncertain" and "sit" in held["why"]


@pytest.mark.slow
def test_qualify_writes_its_report(families_file, tmp_path):
    map_file = tmp_path / "map.json"
    map_file.write_text(_fitted_map().to_json())
    report = qualify(model=None, reward={"kind": "oracle"}, families_file=str(families_file), small=False,
                     out_dir=tmp_path / "out", data_dir=tmp_path, map_file=map_file, progress=False)
    assert report["map"]["verdict"] == "teaches"
    saved = json.loads(Path(report["files"]["json"]).read_text())
    assert saved["pooled"]["value"]["grasp_auc"] == 1.0
    assert Path(report["files"]["png"]).stat().st_size > 1000
    # The battery: sitting at the cube must stay below the noise-free expert under the oracle.
    assert saved["battery"]["scorer"]["sit"] < saved["battery"]["scorer"]["expert"]
    assert saved["behaviours_at_or_above_expert"] == []
    # The table reads each verdict again from the map it is given and updates the report.
    table = [sys.executable, str(REPO / "experiments/learnability/qualify_table.py"), str(tmp_path / "out"),
             "--runs", str(tmp_path), "--out", str(tmp_path / "t.md"), "--png", str(tmp_path / "m.png")]
    done = subprocess.run([*table, "--map", str(tmp_path / "no_map.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(Path(report["files"]["json"]).read_text())["map"]["verdict"] == "unmapped"
    assert "| unmapped |" in (tmp_path / "t.md").read_text()
    subprocess.run([*table, "--map", str(map_file)], check=True, capture_output=True, timeout=300)
    assert json.loads(Path(report["files"]["json"]).read_text())["map"]["verdict"] == "teaches"
    assert (tmp_path / "m.png").stat().st_size > 1000


def _rmtl(*args: str, data: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RMTL_DATA_DIR": str(data), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    return subprocess.run([sys.executable, "-m", "rmtl", *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_the_command_qualifies_a_degraded_oracle_and_a_vlm(families_file, tmp_path):
    r = _rmtl("qualify", "--reward", "degraded_oracle", "--families", str(families_file),
              "--set", "reward_config.error.confusions.grasp_resting=1.0", data=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "resting_grasp_pay" in r.stdout and "verdict:" in r.stdout
    # A VLM renders every family: one short episode keeps it at CI size.
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"task": "fetch_lift", "seed": 5, "families": {
        "noisy": {"group": "noisy_expert", "policy": "expert", "noise_levels": [0.3], "episodes": 1, "stages": [2]}}}))
    r = _rmtl("qualify", "--model", "rmtl-fetch-tiny", "--families", str(one), data=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "qualification" / "reports" / "qualify_rmtl-fetch-tiny.json").read_text())
    assert report["model"] == "rmtl-fetch-tiny" and report["set"]["rows"] > 10
    assert np.isfinite(report["pooled"]["value"]["right_prompt"])
    # The single-prompt reward's battery on the same model (the semantic trap), beside the micro-task one.
    assert np.isfinite(report["battery_single_prompt"]["noisy"]) and "single prompt, at or above the expert" in r.stdout
    assert report["battery_single_prompt"]["noisy"] != report["battery"]["scorer"]["noisy"]
    # A hybrid reuses the model's store; the micro-tasks it names are scored by the model, the rest by
    # the oracle (one expert episode: align is the metric it measures).
    reports = tmp_path / "qualification" / "reports"
    for chosen in ("align", "approach"):
        r = _rmtl("qualify", "--model", "rmtl-fetch-tiny", "--vlm-micro-tasks", chosen, "--families", str(one), data=tmp_path)
        assert r.returncode == 0, r.stderr
    on_align = json.loads((reports / "qualify_rmtl-fetch-tiny_hybrid_align.json").read_text())
    on_approach = json.loads((reports / "qualify_rmtl-fetch-tiny_hybrid_approach.json").read_text())
    oracle = qualify(model=None, reward={"kind": "oracle"}, families_file=str(one), small=False, out_dir=tmp_path / "o",
                     data_dir=tmp_path, progress=False)
    assert on_align["vlm_micro_tasks"] == ["align"] and "oracle on the rest" in on_align["scorer"]
    model_align, oracle_align = report["pooled"]["value"]["align_rank"], oracle["pooled"]["value"]["align_rank"]
    assert np.isfinite(model_align) and model_align != oracle_align
    assert on_align["pooled"]["value"]["align_rank"] == model_align
    assert on_approach["pooled"]["value"]["align_rank"] == oracle_align
    # right_prompt compares the micro-tasks' scores, which a hybrid holds on two scales: not measured.
    assert np.isnan(on_align["pooled"]["value"]["right_prompt"]) and "right_prompt" in on_align["not_measured"]
    bad = _rmtl("qualify", "--model", "rmtl-fetch-tiny", "--vlm-micro-tasks", "lift", "--families", str(one), data=tmp_path)
    assert bad.returncode == 2 and "approach, align, grasp" in bad.stderr.strip().splitlines()[-1]


def test_the_single_prompt_battery_pays_a_family_by_its_scores(rows):
    from pipeline.qualify import single_prompt_battery

    flat = single_prompt_battery(np.zeros((len(rows.states), 1)), rows)
    fams = list(flat)
    high = np.where(rows.family == fams[-1], 1.0, 0.0)[:, None]  # one family scores at the top, the rest at the floor
    paid = single_prompt_battery(high, rows)
    assert paid[fams[-1]] > flat[fams[-1]] and all(paid[f] <= flat[f] + 1e-9 for f in fams[:-1])


def test_bad_scorer_choices_are_one_line(tmp_path):
    r = _rmtl("qualify", data=tmp_path)
    assert r.returncode == 2 and "exactly one scorer" in r.stderr and "Traceback" not in r.stderr
    r = _rmtl("qualify", "--reward", "nosuch", data=tmp_path)
    assert r.returncode == 2 and "unknown reward kind 'nosuch'" in r.stderr
    r = _rmtl("qualify", "--reward", "oracle", "--families", str(tmp_path / "none.yaml"), data=tmp_path)
    assert r.returncode == 2 and "qualification families" in r.stderr


def test_a_score_window_averages_along_each_episode(rows):
    from pipeline.qualify import windowed_scores

    noisy, _ = state_scorer(TASK, {"kind": "degraded_oracle", "error": {"default": {"noise": 0.5}}})
    raw = noisy.scores(rows.states)
    avg = windowed_scores(raw, rows, 3)
    first = np.flatnonzero(rows.episode == rows.episode[0])
    first = first[np.argsort(rows.step[first])]
    np.testing.assert_allclose(avg[first[0]], raw[first[0]])
    np.testing.assert_allclose(avg[first[4]], raw[first[2:5]].mean(axis=0))
    assert scorer_metrics(TASK, avg, rows)["noise_ratio"] < scorer_metrics(TASK, raw, rows)["noise_ratio"]


def test_the_replay_fit_recovers_a_degraded_oracles_error(rows):
    """A degraded oracle's own scores, fitted back: the noise, the systematic error and the resting-grasp
    confusion it was given (the confusion through the map's resting-pay metric)."""
    from pipeline.qualify import fit_replayed_error
    from rmtl.tasks.fetch_lift.phases import rule_phase
    from rmtl.tasks.fetch_lift.scorer_errors import resting_at_gripper
    from rmtl.tasks.fetch_lift.state import gripper_cube_distance

    progress = np.asarray(TASK.oracle_progress(rows.states))
    phases = np.asarray(rule_phase(np.asarray(gripper_cube_distance(rows.states))), dtype=np.int64)

    def fit(error: dict) -> dict:
        kind, _ = state_scorer(TASK, {"kind": "degraded_oracle", "error": error})
        scores = kind.scores(rows.states)
        pay = scorer_metrics(TASK, scores, rows)["resting_grasp_pay"]
        return fit_replayed_error(scores, progress, phases, rows.episode, rows.step, resting_at_gripper(rows.states),
                                  tuple(TASK.micro_tasks.names), pay, confusion="grasp_resting",
                                  confused_task="grasp")["error"]

    align = fit({"default": {"noise": 0.2}})["micro_tasks"]["align"]
    assert 0.12 < align["noise"] < 0.3 and align["systematic"] < 0.15
    assert fit({"confusions": {"grasp_resting": 0.5}})["confusions"]["grasp_resting"] == pytest.approx(0.5, abs=0.1)


@pytest.mark.slow
def test_models_that_see_the_same_frames_share_their_qualification_stores(families_file, tmp_path):
    """Frames are keyed by the declared renderer and input size, not by the model: fast and lit
    (both msaa 0, 64 px) share a folder, r5 (mesh reduction) and tiny (the package renderer) do not;
    a per-model folder from before is still used."""
    from pipeline.qualify import frames_folder

    _, fams = load_families(families_file)
    folder = {m: frames_folder(tmp_path, m, "fetch_lift", fams)
              for m in ("rmtl-fetch-fast", "rmtl-fetch-lit", "rmtl-fetch-fast-r5", "rmtl-fetch-tiny")}
    assert folder["rmtl-fetch-fast"] == folder["rmtl-fetch-lit"]
    assert len({folder["rmtl-fetch-fast"], folder["rmtl-fetch-fast-r5"], folder["rmtl-fetch-tiny"]}) == 3
    assert all(f.parent == tmp_path / "frames" for f in folder.values())
    (tmp_path / "models" / "rmtl-fetch-lit").mkdir(parents=True)
    assert frames_folder(tmp_path, "rmtl-fetch-lit", "fetch_lift", fams) == tmp_path / "models" / "rmtl-fetch-lit"


@pytest.mark.slow
def test_a_vlm_is_loaded_once_for_all_families_and_builds_no_state_cache(tmp_path, monkeypatch):
    """model_scores renders and embeds one store per family with one loaded model, and skips the
    FAISS state cache, which nothing reads on a qualification store."""
    import rmtl.vlm
    from pipeline.qualify import model_scores

    loads = []
    real = rmtl.vlm.load_vlm
    monkeypatch.setattr(rmtl.vlm, "load_vlm", lambda spec, *a, **k: loads.append(spec) or real(spec, *a, **k))
    two = tmp_path / "two.yaml"
    fam = {"group": "noisy_expert", "policy": "expert", "noise_levels": [0.3], "episodes": 1, "stages": [2]}
    two.write_text(yaml.safe_dump({"task": "fetch_lift", "seed": 5, "families": {"a": fam, "b": {**fam, "noise_levels": [0.1]}}}))
    task, fams = load_families(two)
    rows = state_set(task, fams, tmp_path / "states", progress=False)
    scores = model_scores("rmtl-fetch-fast", task, fams, tmp_path / "stores", rows, progress=False)
    assert loads == ["rmtl-fetch-fast"]
    assert scores.shape == (len(rows.states), 3) and np.isfinite(scores).all()
    assert sorted(p.name for p in (tmp_path / "stores").glob("*.zarr")) == ["a.zarr", "b.zarr"]
    assert not list((tmp_path / "stores").glob("*.cache"))


def test_the_fitted_map_ships_with_the_task_package():
    """`rmtl qualify` reads the task's map from the installed package, not from a checkout's results/."""
    import fnmatch
    import tomllib

    from pipeline.qualify import load_map, map_axes
    from rmtl.tasks import get_task

    path = get_task("fetch_lift").learnability_map
    assert path is not None and path.is_file() and "results" not in path.parts
    fitted = load_map()
    assert fitted.to_json() == path.read_text() and fitted.fitted and len(fitted.coef) == len(map_axes(TASK))
    rmtl_dir = Path(__file__).resolve().parents[1] / "rmtl"
    patterns = tomllib.loads((rmtl_dir.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["rmtl"]
    assert any(fnmatch.fnmatch(str(path.relative_to(rmtl_dir)), p) for p in patterns)  # in the wheel


def test_the_shipped_families_resolve_inside_the_package_and_match_the_committed_runs():
    """The default qualification set's learners ship beside its file (an installed wheel holds them),
    byte for byte the committed runs' best policies the file's comment names."""
    import fnmatch
    import tomllib

    from pipeline.qualify.families import FAMILIES_FILE

    pipeline_dir, qualify_dir = REPO / "pipeline", FAMILIES_FILE.parent
    assert qualify_dir == pipeline_dir / "qualify"  # qualify's data lives in its package
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pipeline"]
    assert any(fnmatch.fnmatch(str(FAMILIES_FILE.relative_to(pipeline_dir)), p) for p in patterns)  # in the wheel
    _, fams = load_families()
    learners = [f for f in fams if str(f.rollout["policy"]).endswith(".zip")]
    assert len(learners) == 5
    sources = {"learner_rule_only_failed": "oracle_structure/runs/rule_only_s0",
               "learner_no_phase_half": "oracle_structure/runs/oracle_no_phase_input_s1",
               "learner_oracle_learned": "oracle_structure/runs/oracle_rmtl_s1",
               "learner_pixel_r5_failed": "pixel_fast_r5/runs/rmtl_r5_s0",
               "learner_pixel_fast_failed": "pixel_fast/runs/rmtl_fast_s0"}
    for fam in learners:
        policy = Path(fam.rollout["policy"])
        assert policy.is_file() and policy.is_relative_to(qualify_dir), policy
        for name in ("model.zip", "meta.json"):
            rel = str((policy.parent / name).relative_to(pipeline_dir))
            assert any(fnmatch.fnmatch(rel, p) for p in patterns), rel  # in the wheel
        committed = REPO / "results" / sources[fam.name] / "best" / "model.zip"
        assert policy.read_bytes() == committed.read_bytes(), fam.name


def test_the_qualify_api_names_no_path_outside_its_package():
    """The public names of pipeline.qualify hold no repository path: its data files are its own."""
    import pipeline.qualify as q

    package = Path(q.__file__).resolve().parent
    paths = {n: getattr(q, n) for n in q.__all__ if isinstance(getattr(q, n), Path)}
    assert paths and all(p.is_relative_to(package) for p in paths.values()), paths


def test_a_relative_policy_resolves_beside_its_file_then_in_the_checkout(tmp_path):
    from pipeline.qualify.families import policy_path

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "model.zip").write_bytes(b"zip")
    assert policy_path("mine/model.zip", tmp_path) == tmp_path / "mine" / "model.zip"
    committed = "results/oracle_structure/runs/rule_only_s0/best/model.zip"
    assert policy_path(committed, tmp_path) == REPO / committed
    assert policy_path("absent/model.zip", tmp_path) == tmp_path / "absent" / "model.zip"  # the error names it


def test_a_one_score_configuration_with_a_trap_pose_is_flagged_and_unmapped(tmp_path):
    """A one-score reward that pays a cube resting at the gripper like a lift: sitting at the cube
    returns more than the expert (the semantic trap), and the map, which holds no one-score runs,
    does not give it a verdict."""
    families_file = tmp_path / "families.yaml"
    families_file.write_text(yaml.safe_dump({"task": "fetch_lift", "seed": 123, "families": {
        "expert": {"group": "expert", "policy": "expert", "noise_levels": [0.0], "episodes": 2, "stages": [2, 4]},
        "sit": {"group": "behaviour", "policy": "behaviour:sit_at_cube", "noise_std": 0.0, "episodes": 2, "stages": [0]}}}))
    trap = {"kind": "degraded_oracle", "single_score": True, "error": {"confusions": {"grasp_resting": 1.0}}}
    report = qualify(model=None, reward=trap, families_file=str(families_file), small=False, out_dir=tmp_path / "out",
                     data_dir=tmp_path, progress=False)
    assert "sit" in report["behaviours_at_or_above_expert"]
    assert report["map"]["verdict"] == "unmapped" and "one-score" in report["map"]["why"]
    assert report["configuration"] == {"one_score": True}
    clean = qualify(model=None, reward={"kind": "degraded_oracle", "single_score": True}, families_file=str(families_file),
                    small=False, out_dir=tmp_path / "out2", data_dir=tmp_path, progress=False)
    assert clean["behaviours_at_or_above_expert"] == []


def test_compare_ranks_a_good_scorer_above_a_broken_one(tmp_path):
    from pipeline.qualify.compare import _row, format_compare
    from pipeline.qualify.configurations import comparison_rank

    families_file = tmp_path / "families.yaml"  # enough lifts, approaches and a learner to replay the bounds on
    families_file.write_text(yaml.safe_dump({"task": "fetch_lift", "seed": 321, "families": {
        "expert": {"group": "expert", "policy": "expert", "noise_levels": [0.0, 0.3], "episodes": 12, "stages": [0, 2, 4]},
        "learner": {"group": "learner", "policy": "expert", "noise_levels": [0.6], "episodes": 4, "stages": [4]}}}))

    def row(name: str, reward: dict) -> dict:
        report = qualify(model=None, reward=reward, families_file=str(families_file), small=False,
                         out_dir=tmp_path / name, data_dir=tmp_path, progress=False)
        report["configuration"] = {"variant": name, "single_prompt": True, "views": ["wide_view"]}
        return _row(report)

    good = row("good", {"kind": "degraded_oracle", "single_score": True})
    broken = row("broken", {"kind": "degraded_oracle", "single_score": True,
                            "error": {"default": {"dead_zone": 1.0}}})  # pays only the goal itself
    assert broken["early_progress"]["grasp_early_u"] == 0 < good["early_progress"]["grasp_early_u"]
    assert broken["early_progress"]["grasp_early_snr"] == 0 < good["early_progress"]["grasp_early_snr"]
    ranked = comparison_rank([broken, good])
    assert [r["variant"] for r in ranked] == ["good", "broken"]
    table = format_compare({"model": "synthetic", "ranked": ranked})
    assert table.index("| 1 | good") < table.index("| 2 | broken")


@pytest.mark.slow
def test_the_command_compares_a_models_configurations(tmp_path):
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"task": "fetch_lift", "seed": 5, "families": {
        "noisy": {"group": "noisy_expert", "policy": "expert", "noise_levels": [0.3], "episodes": 1, "stages": [0]}}}))
    r = _rmtl("qualify", "--model", "rmtl-fetch-tiny", "--compare", "--families", str(one), data=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "qualification" / "reports" / "compare_rmtl-fetch-tiny.json").read_text())
    assert sorted(x["variant"] for x in out["ranked"]) == ["rmtl", "single_prompt_multi_view", "single_prompt_single_view"]
    views = {x["variant"]: x["configuration"]["views"] for x in out["ranked"]}
    assert len(views["single_prompt_single_view"]) == 1 and len(views["single_prompt_multi_view"]) == 6
    assert "| 1 |" in r.stdout and "grasp_early_u" in r.stdout
    bad = _rmtl("qualify", "--model", "rmtl-fetch-tiny", "--variant", "rule_only", "--families", str(one), data=tmp_path)
    assert bad.returncode == 2 and "not a VLM's" in bad.stderr.strip().splitlines()[-1]

"""``rmtl qualify fit-map``: the map refitted from run folders is one that ``rmtl qualify`` reads,
the fit reproduces the shipped map from the committed runs, and the command replaces only what it wrote."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.qualify import load_map, map_axes, map_support, map_verdict, no_scorer_metrics
from pipeline.qualify.fit import logistic_fit, outcome, sweep_conditions
from rmtl.errors import ConfigError
from rmtl.tasks import get_task

REPO = Path(__file__).resolve().parents[1]
TASK = get_task("fetch_lift")
OUTCOMES = {"exact": 0.9, "noise_0.1": 0.8, "smooth_1.5": 0.0, "grasp_inverted": 0.02}


def _rmtl(*args: str, data: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RMTL_DATA_DIR": str(data), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    return subprocess.run([sys.executable, "-m", "rmtl", *args], capture_output=True, text=True, env=env, timeout=900)


def _selection(run: Path, best: float, final: float | None = None) -> None:
    run.mkdir(parents=True)
    (run / "selection.json").write_text(json.dumps({
        "best": {"num_timesteps": 200000, "test": {"success_rate": best}},
        "final": {"num_timesteps": 300000, "test": {"success_rate": best if final is None else final}}}))


@pytest.fixture(scope="module")
def fixture(tmp_path_factory) -> dict:
    """A families file of three short families, a sweep of four conditions (seed 0) with finished
    fake runs, and one rule-only reference run."""
    root = tmp_path_factory.mktemp("fit")
    families = root / "families.yaml"
    families.write_text(yaml.safe_dump({"task": "fetch_lift", "seed": 321, "families": {
        "expert": {"group": "expert", "policy": "expert", "noise_levels": [0.0], "episodes": 2, "stages": [0, 4]},
        "noisy": {"group": "noisy_expert", "policy": "expert", "noise_levels": [0.3], "episodes": 2, "stages": [2, 4]},
        "sit": {"group": "behaviour", "policy": "behaviour:sit_at_cube", "noise_std": 0.0, "episodes": 1, "stages": [4]}}}))
    conditions = root / "conditions.yaml"
    conditions.write_text(yaml.safe_dump({
        "output_root": str(root / "runs"), "steps": 300000, "set": {"vec_env": "dummy"},
        "runs": [{"variants": ["degraded_oracle"], "seeds": [0], "conditions": {
            "exact": {}, "noise_0.1": {"reward.error.default.noise": 0.1},
            "smooth_1.5": {"reward.error.default.systematic": 1.5},
            "grasp_inverted": {"reward.error.micro_tasks.grasp.inverted_share": 1.0}}}]}, sort_keys=False))
    for name, best in OUTCOMES.items():
        _selection(root / "runs" / f"{name}_s0", best)
    reference = root / "ref" / "rule_only_s0"
    _selection(reference, 0.01)
    (reference / "config.yaml").write_text(yaml.safe_dump({"variant": "rule_only", "seed": 0, "total_timesteps": 600320,
                                                           "reward": {"kind": "rule_only"}}))
    return {"root": root, "families": families, "conditions": conditions, "reference": reference}


@pytest.mark.slow
def test_fit_map_refits_a_map_that_qualify_reads(fixture, tmp_path):
    f = fixture
    out = tmp_path / "map"
    args = ("qualify", "fit-map", "--conditions", str(f["conditions"]), "--checks", "none", "--reference",
            str(f["reference"]), "--families", str(f["families"]))
    r = _rmtl(*args, "--out", str(out), data=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "5 runs, 4 complete conditions; fitted: True" in r.stdout and "coefficients (standardised)" in r.stdout
    fitted = load_map(out / "learnability_map.json")
    assert fitted is not None and fitted.fitted and fitted.axes == list(map_axes(TASK))
    by_name = {c.name: c for c in fitted.conditions}
    assert list(by_name) == [*OUTCOMES, "rule_only_600k"]
    assert {n: c.outcomes for n, c in by_name.items()} == {**{n: [o] for n, o in OUTCOMES.items()}, "rule_only_600k": [0.01]}
    assert by_name["rule_only_600k"].metrics == no_scorer_metrics(TASK)
    # Each condition is measured with its own error: the exact oracle grasps perfectly, the inverted grasp does not.
    assert by_name["exact"].metrics["grasp_auc"] == 1.0 and by_name["grasp_inverted"].metrics["grasp_auc"] < 0.5
    # The fit follows the runs: the exact oracle's metrics are likelier to teach than a smooth error's.
    p = {n: map_verdict(by_name[n].metrics, fitted)["p_teaches"] for n in ("exact", "smooth_1.5")}
    assert p["exact"] > 0.5 > p["smooth_1.5"] and len(fitted.bootstrap_coef) > 100
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert [row["condition"] for row in rows] == [*OUTCOMES, "rule_only_600k"]
    assert all((out / n).stat().st_size > 0 for n in ("runs.md", "conditions.md", "map_metrics.png", "map_2d.png"))

    # rmtl qualify reads the refitted map (--map): its verdict names the fixture's conditions.
    q = _rmtl("qualify", "--reward", "oracle", "--families", str(f["families"]), "--map", str(out / "learnability_map.json"),
              "--out", str(tmp_path / "reports"), data=tmp_path)
    assert q.returncode == 0, q.stderr
    report = json.loads((tmp_path / "reports" / "qualify_oracle.json").read_text())
    assert report["map"]["nearest_conditions"][0] == "exact" and report["map"]["verdict"] != "unmapped"

    # A second fit replaces only the files it wrote; a folder with another runs.md is refused in one line.
    again = _rmtl(*args, "--out", str(out), data=tmp_path)
    assert again.returncode == 0, again.stderr
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "runs.md").write_text("mine\n")
    refused = _rmtl(*args, "--out", str(foreign), data=tmp_path)
    assert refused.returncode == 2 and "runs.md" in refused.stderr and "Traceback" not in refused.stderr
    assert (foreign / "runs.md").read_text() == "mine\n"
    # The task's shipped map is replaced only when asked (--ship).
    shipped = _rmtl(*args, "--out", str(tmp_path / "other"), "--map-out", str(TASK.learnability_map), data=tmp_path)
    assert shipped.returncode == 2 and "--ship" in shipped.stderr


def test_a_sweep_of_conditions_names_its_runs_and_rewards(fixture):
    conds, root, steps = sweep_conditions(fixture["conditions"])
    assert [c.name for c in conds] == list(OUTCOMES) and steps == 300000 and root.endswith("runs")
    noisy = next(c for c in conds if c.name == "noise_0.1")
    assert noisy.reward == {"kind": "degraded_oracle", "error": {"default": {"noise": 0.1}}}
    assert noisy.runs == ((0, "noise_0.1_s0"),)


def test_a_map_of_another_schema_is_one_line(tmp_path):
    old = json.loads(TASK.learnability_map.read_text())
    old.pop("version")
    (tmp_path / "old.json").write_text(json.dumps(old))
    with pytest.raises(ConfigError, match="schema version None.*refit it with 'rmtl qualify fit-map'"):
        load_map(tmp_path / "old.json")
    (tmp_path / "bad.json").write_text(json.dumps({**old, "version": 1, "better": {}}))
    with pytest.raises(ConfigError, match="does not follow its schema"):
        load_map(tmp_path / "bad.json")


@pytest.mark.skipif(not (REPO / "results/learnability/runs.csv").is_file(), reason="the committed map runs are not here")
def test_the_fit_reproduces_the_shipped_map_from_the_committed_runs():
    """The committed runs (their outcomes read from the run folders, their metrics from runs.csv)
    fitted again give the shipped map's coefficients, bootstrap and support."""
    shipped = load_map(TASK.learnability_map)
    axes = list(map_axes(TASK))
    rows = list(csv.DictReader((REPO / "results/learnability/runs.csv").open()))
    conditions, _, _ = sweep_conditions(REPO / "experiments/learnability/conditions.yaml")
    names = {c.name for c in conditions}
    points = []
    for r in rows:
        run = (REPO / "results/learnability/runs" / f"{r['condition']}_s{r['seed']}" if r["condition"] in names
               else REPO / "results/oracle_structure/runs" / f"rule_only_s{r['seed']}")
        o = outcome(run)
        assert o is not None and o["best"] == pytest.approx(float(r["test_success"]))
        points.append(({k: float(r[k]) for k in axes}, o["best"]))
    assert len(points) == shipped.runs
    fit = logistic_fit(points, axes, shipped.teaches_at)
    np.testing.assert_allclose(fit.coef, shipped.coef, atol=1e-6)
    np.testing.assert_allclose(fit.intercept, shipped.intercept, atol=1e-6)
    np.testing.assert_allclose(fit.mean, shipped.mean, atol=1e-9)
    assert len(fit.bootstrap_coef) == len(shipped.bootstrap_coef)
    np.testing.assert_allclose(fit.bootstrap_coef[:20], shipped.bootstrap_coef[:20], atol=1e-6)
    support = map_support([(m, o) for (m, o), r in zip(points, rows) if r["condition"] in names], shipped.teaches_at,
                          shipped.better)
    assert support == pytest.approx(shipped.support)


def test_fit_map_outside_the_checkout_says_where_to_run_it(tmp_path, monkeypatch):
    from pipeline.qualify.fit import FitMapConfig, fit_map_command

    monkeypatch.chdir(tmp_path)  # a wheel's user in their own folder: the map's runs are not here
    with pytest.raises(ConfigError, match="run it from the checkout's root, or pass --conditions"):
        fit_map_command(FitMapConfig())
    assert not any(tmp_path.iterdir())  # refused before writing anything


@pytest.mark.slow
def test_an_early_progress_map_fits_two_budgets_and_one_score_rewards_and_qualify_reads_it(fixture, tmp_path):
    """300k conditions and 600k one-score conditions in one fit: each condition carries its budget, its
    form (phased or one score) and its early-progress axes; a dead zone on the grasp lowers the grasp's
    early gain; a one-score reward then gets a verdict where the plain map leaves it unmapped."""
    from pipeline.qualify.fit import extended_axes, fit_map
    from pipeline.qualify.report import qualify

    f = fixture
    families = tmp_path / "families.yaml"  # enough lifts and approaches for the early-progress bins
    families.write_text(yaml.safe_dump({"task": "fetch_lift", "seed": 321, "families": {
        "expert": {"group": "expert", "policy": "expert", "noise_levels": [0.0], "episodes": 8, "stages": [4]},
        "noisy": {"group": "noisy_expert", "policy": "expert", "noise_levels": [0.6, 1.0], "episodes": 12, "stages": [4]}}}))
    c600 = tmp_path / "one_score.yaml"
    c600.write_text(yaml.safe_dump({
        "output_root": str(tmp_path / "runs600"), "steps": 600000, "set": {"vec_env": "dummy"},
        "runs": [{"variants": ["single_score_oracle"], "seeds": [0], "conditions": {
            "single_exact": {}, "single_grasp_dead": {"reward.error.micro_tasks.grasp.dead_zone": 1.0}}}]}, sort_keys=False))
    _selection(tmp_path / "runs600" / "single_exact_s0", 0.95)
    _selection(tmp_path / "runs600" / "single_grasp_dead_s0", 0.0)
    common = dict(checks=None, data_dir=tmp_path / "data", reference=[f["reference"]], families_file=str(families),
                  progress=False, runs=[f["root"] / "runs", tmp_path / "runs600"])
    with pytest.raises(ConfigError, match="different steps \\(300k, 600k\\).*add --early-progress"):
        fit_map(conditions=[f["conditions"], c600], out=tmp_path / "plain", **common)

    result = fit_map(conditions=[f["conditions"], c600], out=tmp_path / "map", early_progress=True, **common)
    fitted = result["map"]
    assert fitted.fitted and tuple(fitted.axes) == extended_axes(TASK)[0]
    by_name = {c.name: c.metrics for c in fitted.conditions}
    assert by_name["exact"]["budget"] == 0.0 and by_name["single_exact"]["budget"] == 1.0
    assert by_name["exact"]["phased"] == 1.0 and by_name["single_exact"]["phased"] == 0.0
    assert by_name["rule_only_600k"]["budget"] == pytest.approx(1.0) and by_name["rule_only_600k"]["grasp_early_u"] == 0.0
    assert by_name["single_grasp_dead"]["grasp_early_snr"] < by_name["single_exact"]["grasp_early_snr"]
    assert by_name["single_grasp_dead"]["grasp_early_u"] < by_name["single_exact"]["grasp_early_u"]

    one_score = {"kind": "degraded_oracle", "single_score": True}
    plain = qualify(model=None, reward=one_score, families_file=str(families), small=False, out_dir=tmp_path / "q1",
                    data_dir=tmp_path / "data", progress=False)
    assert plain["map"]["verdict"] == "unmapped"  # the shipped map holds no one-score runs
    read = qualify(model=None, reward=one_score, families_file=str(families), small=False, out_dir=tmp_path / "q2",
                   data_dir=tmp_path / "data", progress=False, map_file=tmp_path / "map" / "learnability_map.json")
    assert read["map"]["verdict"] != "unmapped" and 0.0 <= read["map"]["p_teaches"] <= 1.0

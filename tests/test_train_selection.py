"""Evaluation that survives PPO's swings (rmtl.train.eval.selection): best checkpoint on validation
seeds reported on disjoint test seeds, the final one on the same test seeds, the mean of the
last 5 periodic evaluations, and the report's table, on a tiny dense-reward run."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from rmtl.errors import ConfigError
from rmtl.train.eval.selection import (
    SEED_BLOCK,
    TEST_SEED,
    VALIDATION_SEED,
    check_seed_ranges,
    last_evaluations,
    select_checkpoint,
)

STEPS = ["step_000000032", "step_000000064", "step_000000096", "step_000000128"]


@pytest.fixture
def run(tiny_dense_run, tmp_path):
    """A private copy: the tests below write selection.json and touch checkpoints."""
    return shutil.copytree(tiny_dense_run, tmp_path / "run")


def test_seed_ranges_are_disjoint():
    check_seed_ranges({"periodic": (1_000_000, 50), "validation": (VALIDATION_SEED, 100), "test": (TEST_SEED, 200)})
    check_seed_ranges({"periodic": (1_000_000, SEED_BLOCK), "validation": (VALIDATION_SEED, SEED_BLOCK),
                       "test": (TEST_SEED, 200)})
    with pytest.raises(ConfigError, match="overlap"):
        check_seed_ranges({"periodic": (VALIDATION_SEED - 10, 50), "validation": (VALIDATION_SEED, 100)})
    with pytest.raises(ConfigError, match="episodes must be"):
        check_seed_ranges({"test": (TEST_SEED, SEED_BLOCK + 1)})


def test_select_evaluates_every_checkpoint_and_tests_best_and_final(run):
    from rmtl.train.eval.evaluate import evaluate_checkpoint
    from rmtl.train.run.csv_log import read_csv

    sel = select_checkpoint(run, validation_episodes=3, test_episodes=4)
    assert [v["checkpoint"] for v in sel["validation"]] == STEPS
    assert all(v["seed"] == VALIDATION_SEED and v["episodes"] == 3 for v in sel["validation"])
    assert sel["final"]["checkpoint"] == STEPS[-1] and sel["final"]["num_timesteps"] == 128
    best = sel["best"]
    assert best["validation"]["success_rate"] == max(v["success_rate"] for v in sel["validation"])
    for part in (best["test"], sel["final"]["test"]):
        assert part["seed"] == TEST_SEED and part["episodes"] == 4
    again = evaluate_checkpoint(run / "checkpoints" / best["checkpoint"], 4, TEST_SEED).to_dict()
    assert {k: again[k] for k in ("successes", "mean_length")} == {k: best["test"][k] for k in ("successes", "mean_length")}
    assert json.loads((run / "selection.json").read_text())["best"] == json.loads(json.dumps(best))
    rows = read_csv(run / "eval.csv")
    assert len(rows) == 8 and sel["last_periodic"]["n"] == 5
    assert sel["last_periodic"]["mean_success_rate"] == pytest.approx(sum(r["success_rate"] for r in rows[-5:]) / 5)
    assert sel["last_periodic"]["first_step"] == rows[-5]["timesteps"]


def test_a_selection_without_stamps_is_evaluated_again(run):
    """A kept run's selection.json (written when it finished) has no checkpoint stamps; selecting
    over its local checkpoints evaluates them again instead of failing or trusting it."""
    sel = select_checkpoint(run, validation_episodes=3, test_episodes=4)
    for v in sel["validation"]:
        del v["stamp"]
    for v in sel["test"].values():
        v.pop("stamp", None)
    (run / "selection.json").write_text(json.dumps(sel))
    again = select_checkpoint(run, validation_episodes=3, test_episodes=4)
    assert [v["checkpoint"] for v in again["validation"]] == STEPS and all("stamp" in v for v in again["validation"])
    assert again["best"]["test"]["successes"] == sel["best"]["test"]["successes"]  # seeded: the same figures


def test_best_is_the_highest_validation_rate_ties_to_the_later(run, monkeypatch):
    import rmtl.train.eval.evaluate as ev

    rates = {"step_000000032": 0.2, "step_000000064": 0.6, "step_000000096": 0.6, "step_000000128": 0.1}
    calls = []

    def fake(path, episodes, seed, **kw):
        name = os.path.basename(str(path))
        calls.append((name, seed))
        return ev.EvalResult(episodes, round(rates[name] * episodes), rates[name], 0.0, 1.0, 10.0, seed, (0.75, 1.0),
                             str(path), int(name[5:]))

    monkeypatch.setattr(ev, "evaluate_checkpoint", fake)
    sel = select_checkpoint(run, validation_episodes=10, test_episodes=20)
    assert sel["best"]["checkpoint"] == "step_000000096" and sel["final"]["checkpoint"] == "step_000000128"
    assert sorted(c for c in calls if c[1] == TEST_SEED) == [("step_000000096", TEST_SEED), ("step_000000128", TEST_SEED)]
    # Up to date: nothing is evaluated again, not after a copy or a clone gives the files new times;
    # new weights under a step name are.
    calls.clear()
    select_checkpoint(run, validation_episodes=10, test_episodes=20)
    assert calls == []
    ck = run / "checkpoints" / "step_000000064" / "model.zip"
    os.utime(ck, ns=(ck.stat().st_atime_ns, ck.stat().st_mtime_ns + 10**9))
    select_checkpoint(run, validation_episodes=10, test_episodes=20)
    assert calls == []
    ck.write_bytes((run / "checkpoints" / "step_000000032" / "model.zip").read_bytes())
    select_checkpoint(run, validation_episodes=10, test_episodes=20)
    assert calls == [("step_000000064", VALIDATION_SEED)]
    # Other episode counts: everything again.
    calls.clear()
    select_checkpoint(run, validation_episodes=5, test_episodes=20)
    assert len(calls) == 4 + 2


def test_overlapping_periodic_seeds_are_refused(run):
    import yaml

    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["eval_seed"] = VALIDATION_SEED - 1
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="overlap"):
        select_checkpoint(run, validation_episodes=3, test_episodes=4)


def test_last_evaluations_pooled_interval():
    rows = [{"timesteps": 10 * i, "episodes": 50, "successes": s, "success_rate": s / 50}
            for i, s in enumerate([0, 10, 40, 20, 30, 25, 35], start=1)]
    last = last_evaluations(rows)
    assert last["n"] == 5 and last["episodes"] == 250 and last["successes"] == 150
    assert last["mean_success_rate"] == pytest.approx(0.6) and last["ci_low"] < 0.6 < last["ci_high"]
    assert (last["min"], last["max"], last["first_step"], last["last_step"]) == (0.4, 0.8, 30, 70)
    assert last_evaluations([]) == {}


def test_report_table_and_cli(run, tmp_path, capsys):
    from rmtl.cli import run as rmtl
    from rmtl.train.run.csv_log import read_csv
    from rmtl.train.report.stage1 import stage1_report

    paths = stage1_report([run], tmp_path / "rep", select=True, validation_episodes=3, test_episodes=4)
    sel = json.loads((run / "selection.json").read_text())
    (row,) = read_csv(paths["success_table_csv"])
    assert row["final_steps"] == 128 and row["best_steps"] == sel["best"]["num_timesteps"]
    assert row["final_test_success"] == sel["final"]["test"]["success_rate"]
    assert row["best_test_success"] == sel["best"]["test"]["success_rate"] and row["test_episodes"] == 4
    assert row["last5_n"] == 5 and row["last5_mean_success"] == pytest.approx(sel["last_periodic"]["mean_success_rate"])
    md = paths["success_table_md"].read_text()
    assert "best on validation (test)" in md and "4 episodes from seed 3000000" in md
    # Without --select the table uses the selection that is there (none: dashes, and says how to compute it).
    bare = shutil.copytree(run, tmp_path / "bare", ignore=shutil.ignore_patterns("selection.json"))
    md = stage1_report([bare], tmp_path / "rep2")["success_table_md"].read_text()
    assert "not computed" in md
    # A run kept as its logs only (no checkpoints) is reported from eval.csv, beside a selected run.
    logs = tmp_path / "logs_only"
    logs.mkdir()
    for name in ("config.yaml", "eval.csv", "curriculum.csv"):
        shutil.copy(run / name, logs / name)
    paths = stage1_report([run, logs], tmp_path / "rep3", select=True, validation_episodes=3, test_episodes=4)
    full, kept = read_csv(paths["success_table_csv"])
    assert full["final_test_success"] != "" and kept["final_test_success"] == "" and kept["last5_n"] == 5
    assert kept["last5_mean_success"] == pytest.approx(full["last5_mean_success"])
    assert "eval.csv only" in paths["success_table_md"].read_text()
    capsys.readouterr()
    assert rmtl(["train", "select", str(bare), "--validation-episodes", "2", "--test-episodes", "2"]) == 0
    assert "best on validation" in capsys.readouterr().out and (bare / "selection.json").is_file()
    assert rmtl(["report", str(bare), "--out", str(tmp_path / "rep3"), "--validation-episodes", "2",
                 "--test-episodes", "2"]) == 0
    assert "2 episodes from seed 3000000" in capsys.readouterr().out

"""What the learner was paid: window means of the reward terms from a run's progress logs."""

import csv

from rmtl.train.report.reward_trace import reward_trace, trace_rows
from rmtl.train.report.runs import load_run
from rmtl.train.report.stage1 import stage1_report

HEADER = ["time/total_timesteps", "reward/score", "reward/low", "reward/high", "reward/u", "reward/reward",
          "rollout/success_rate", "curriculum/stage", "phase/frac_approach", "phase/frac_grasp"]


def _run(tmp_path, name, logs):
    """A kept run directory whose progress logs are ``logs``: file name -> rows (HEADER's order)."""
    run = tmp_path / name
    run.mkdir()
    (run / "config.yaml").write_text("variant: rmtl\nseed: 4\n")
    for fname, rows in logs.items():
        with open(run / fname, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(HEADER)
            w.writerows(rows)
    return run


def test_the_trace_averages_each_window_and_a_resumed_log_wins(tmp_path):
    first = [  # steps, score, low, high, u, reward, success, level, approach, grasp
        (640, 0.70, 0.60, 0.80, 0.50, -0.5, 0.0, 0, 1.0, 0.0),
        (1280, 0.74, 0.70, 0.80, 0.40, -0.6, 0.0, 0, 0.5, 0.5),
        (1920, 0.10, 0.00, 0.20, 0.90, -0.1, 1.0, 1, 0.0, 1.0)]  # logged again after the resume: replaced
    resumed = [
        (1920, 0.76, 0.74, 0.78, 0.50, -0.5, 0.0, 0, 0.0, 1.0),
        (2560, 0.80, 0.74, 0.82, 0.75, -0.25, 0.5, 1, 0.0, 1.0)]
    run = _run(tmp_path, "run", {"progress_000000000.csv": first, "progress_000001280.csv": resumed})
    rows = trace_rows(load_run(run), window=1280)
    assert [r["env_steps"] for r in rows] == [1280, 2560]
    a, b = rows
    assert a["rollouts"] == 2 and a["score"] == 0.72 and a["low"] == 0.65 and a["high"] == 0.8
    assert a["band"] == 0.15 and a["frac_approach"] == 0.75 and a["frac_grasp"] == 0.25
    assert b["rollouts"] == 2 and b["score"] == 0.78 and b["u"] == 0.625 and b["band"] == 0.06
    assert b["train_success"] == 0.25 and b["level"] == 0.5 and (b["variant"], b["seed"]) == ("rmtl", 4)


def test_the_report_draws_the_trace_and_passes_over_runs_without_a_vlm_score(tmp_path):
    vlm = _run(tmp_path, "vlm", {"progress_000000000.csv": [(640, 0.7, 0.6, 0.8, 0.5, -0.5, 0.0, 0, 1.0, 0.0)]})
    oracle = tmp_path / "oracle"  # an oracle run logs no reward/score
    oracle.mkdir()
    (oracle / "config.yaml").write_text("variant: oracle_rmtl\nseed: 0\n")
    (oracle / "progress_000000000.csv").write_text("time/total_timesteps,rollout/success_rate\n640,0.5\n")
    assert reward_trace([load_run(oracle)], tmp_path / "none") == {}
    paths = stage1_report([vlm, oracle], tmp_path / "report")
    assert paths["reward_trace_png"].stat().st_size > 0
    with open(paths["reward_trace_csv"]) as f:
        assert [(r["variant"], r["env_steps"]) for r in csv.DictReader(f)] == [("rmtl", "20000")]

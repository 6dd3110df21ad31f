"""experiments/learnability/calibration.py scores the predictions an experiment registered in its
PREDICTIONS.md against that arm's runs, apart from the retrospective points, and only when the
registration is older than the run."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PREDICTIONS = """# Predictions
| configuration (arm) | `rmtl qualify` verdict | P(teaches) [90%] | weakest early gain in u (phase) | interim order |
|---|---|---|---|---|
| RMTL (`rmtl`: micro-task prompts, six views) | **uncertain** | **0.60 [0.28, 0.80]** | +0.03 (grasp) | 1 |
| single prompt + six views (`single_prompt_multi_view`) | **unmapped** | none | -0.05 (approach) | 2 |
"""


def _run(runs: Path, name: str, started: float, best: float) -> None:
    (runs / name).mkdir(parents=True)
    (runs / name / "sweep_starts.jsonl").write_text(json.dumps({"time": started, "from_step": 0}) + "\n")
    (runs / name / "selection.json").write_text(json.dumps({"best": {"test": {"success_rate": best}}}))


def test_registered_predictions_are_scored_only_against_younger_runs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "learnability"))
    import calibration

    exp = tmp_path / "fig"
    exp.mkdir()
    (exp / "PREDICTIONS.md").write_text(PREDICTIONS)
    _run(exp / "runs", "rmtl_s0", 2000.0, 0.0)
    _run(exp / "runs", "rmtl_s1", 500.0, 0.9)  # started before the registration: not a prediction
    _run(exp / "runs", "single_prompt_multi_view_s0", 2000.0, 0.95)
    _run(exp / "runs", "single_prompt_single_view_s0", 2000.0, 0.0)  # an arm nobody registered
    monkeypatch.setattr(calibration, "registered_at", lambda path: 1000.0)

    rows = {Path(r["run"]).name: r for r in calibration.prospective(tmp_path, teaches_at=0.5)}
    assert set(rows) == {"rmtl_s0", "rmtl_s1", "single_prompt_multi_view_s0"}
    assert rows["rmtl_s0"]["p"] == 0.60 and rows["rmtl_s0"]["before"] and not rows["rmtl_s0"]["taught"]
    assert not rows["rmtl_s1"]["before"]
    assert rows["single_prompt_multi_view_s0"]["p"] is None and rows["single_prompt_multi_view_s0"]["verdict"] == "unmapped"
    text = "\n".join(calibration.prospective_lines(list(rows.values())))
    assert "**Prospective Brier: 0.360 over 1 run(s)**" in text  # (0.60 - 0)^2, the only scored row
    assert "(not after the registration)" in text

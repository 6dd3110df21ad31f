"""experiments/learnability/lomo.py: each model's runs are predicted by a fit that never saw that model's
runs, and the committed leave-one-model-out table is what the script writes from the committed runs."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _point(model: str, x: float, outcome: float) -> dict:
    return {"model": model, "scorer": model, "run": f"{model} run", "metrics": {"a": x}, "outcome": outcome}


def test_a_models_runs_never_enter_their_own_fold(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "learnability"))
    import lomo

    seen: list[list[float]] = []
    real = lomo.logistic_fit

    def recording_fit(points, axes, teaches_at):
        seen.append(sorted(round(p[0]["a"], 3) for p in points))
        return real(points, axes, teaches_at)

    monkeypatch.setattr(lomo, "logistic_fit", recording_fit)
    base = [({"a": float(x)}, float(x > 0)) for x in (-2, -1, -0.5, 0.5, 1, 2)]
    # model "m" contradicts the base (high a, no teaching); model "n" agrees with it
    points = [_point("m", 3.01, 0.0), _point("m", 2.99, 0.0), _point("n", 1.51, 1.0), _point("n", -1.49, 0.0)]
    rows = {(r["model"], r["metrics"]["a"]): r for r in lomo.lomo(points, base, ["a"], 0.5)}
    assert len(seen) == 2  # one fit per held-out model
    fold_m, fold_n = seen  # models in sorted order
    assert 3.01 not in fold_m and 2.99 not in fold_m and 1.51 in fold_m
    assert 1.51 not in fold_n and 3.01 in fold_n
    # held out, m's runs are predicted from the base and n alone: confidently "teaches", and wrong
    assert rows[("m", 3.01)]["p"] > 0.5 and not rows[("m", 3.01)]["taught"]
    assert rows[("n", 1.51)]["taught"] and rows[("n", -1.49)]["p"] < rows[("n", 1.51)]["p"]


def test_a_run_whose_report_has_a_trap_is_held_at_does_not_teach_with_its_p_kept(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "learnability"))
    import lomo

    base = [({"a": float(x)}, float(x > 0)) for x in (-2, -1, -0.5, 0.5, 1, 2)]
    free, trapped = _point("m", 2.0, 0.0), {**_point("n", 2.0, 0.0), "trap": {"trap_share": 0.95}}
    rows = {r["model"]: r for r in lomo.lomo([free, trapped], base, ["a"], 0.5)}
    assert rows["n"]["verdict"] == "does not teach (trap)" and not rows["m"]["verdict"].endswith("(trap)")
    assert rows["n"]["p"] == pytest.approx(rows["m"]["p"])  # the hold changes the verdict, never P
    line = lomo.verdict_line(list(rows.values()))
    assert "1 held" in line and "decided verdicts right" in line


@pytest.mark.slow  # the whole script over every committed report and run, with its bootstrap fits
def test_committed_lomo_table_is_what_the_script_writes(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "learnability"))
    import lomo

    assert lomo.main(["--out", str(tmp_path)]) == 0
    committed = ROOT / "results" / "learnability"
    assert (tmp_path / "calibration_lomo.md").read_text() == (committed / "calibration_lomo.md").read_text()
    figures = json.loads((tmp_path / "calibration.json").read_text())
    shipped = json.loads((committed / "calibration.json").read_text())
    assert (figures["lomo_brier"], figures["lomo_runs"]) == (shipped["lomo_brier"], shipped["lomo_runs"])

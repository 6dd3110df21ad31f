"""experiments/pixel/summarize_fig5.py decides Fig. 5's two claims by RULE.md's seed-pair rule from
the kept run folders: open while a seed is missing, then supported / contradicted."""

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEPT = ("selection.json", "summary.json", "eval.csv", "config.yaml")


def _copy_run(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for name in KEPT:
        shutil.copy(src / name, dst / name)


def test_fig5_claims_stay_open_until_seed_2_then_follow_the_rule(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "pixel"))
    import summarize_fig5

    committed = ROOT / "results" / "pixel_fig5" / "runs"
    runs = tmp_path / "runs"
    for arm in ("rmtl", "single_prompt_multi_view", "single_prompt_single_view"):
        for seed in (0, 1):
            _copy_run(committed / f"{arm}_s{seed}", runs / f"{arm}_s{seed}")
    _copy_run(committed / "rmtl_s0", runs / "rmtl_s2")  # RMTL's seed 2 as its seed 0: 0.000
    assert summarize_fig5.main(["--runs", str(runs), "--out", str(tmp_path / "a")]) == 0
    lines = (tmp_path / "a" / "decision.txt").read_text().splitlines()
    assert all(": open (seeds finished:" in ln for ln in lines) and len(lines) == 2, lines
    # seed 2 of both single-prompt arms as their seed 1 (six views 0.920, one view 0.000)
    for arm in ("single_prompt_multi_view", "single_prompt_single_view"):
        _copy_run(committed / f"{arm}_s1", runs / f"{arm}_s2")
    summarize_fig5.main(["--runs", str(runs), "--out", str(tmp_path / "b")])
    claim1, claim2 = (tmp_path / "b" / "decision.txt").read_text().splitlines()
    assert "claim 1" in claim1 and ": contradicted (d = -0.933;" in claim1, claim1  # 0.0017 - 0.935
    assert "claim 2" in claim2 and ": supported (d = +0.925;" in claim2, claim2  # 0.935 - 0.010
    table = (tmp_path / "b" / "runs.md").read_text()
    assert table.count("| single prompt + one view |") == 3 and table.count("| RMTL |") == 3


def test_fig5_refuses_runs_of_two_models_in_one_line(tmp_path, monkeypatch, capsys):
    """Fig. 5 compares arms of one model: a round-8 run copied among round 7's is refused by name."""
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "pixel"))
    import summarize_fig5

    runs = tmp_path / "runs"
    _copy_run(ROOT / "results" / "pixel_fig5" / "runs" / "rmtl_s0", runs / "rmtl_s0")
    assert summarize_fig5.runs_model(runs) == "rmtl-fetch-fast-r7"
    _copy_run(ROOT / "results" / "pixel_fig5_r8" / "runs" / "rmtl_s0", runs / "rmtl_s1")
    with pytest.raises(SystemExit) as e:
        summarize_fig5.main(["--runs", str(runs), "--out", str(tmp_path / "out")])
    assert "rmtl-fetch-fast-r7" in str(e.value) and "rmtl-fetch-fast-r8" in str(e.value) and "give --runs of one sweep" in str(e.value)
    assert not (tmp_path / "out").exists()  # nothing written

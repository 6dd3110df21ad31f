"""experiments/learnability/trap_search.py: coverage scenes scored by a single-prompt reward, resting poses
against lifted ones, at tiny size on the shipped offline model."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_trap_search_tables_resting_against_lifted_for_both_configurations(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "learnability"))
    monkeypatch.setenv("RMTL_DATA_DIR", str(tmp_path / "data"))
    import trap_search

    out = tmp_path / "trap.md"
    assert trap_search.main(["--model", "rmtl-fetch-tiny", "--scenes", "20", "--out", str(out)]) == 0
    text = out.read_text()
    assert "on 20 coverage scenes (10 free with the cube resting" in text
    for name in ("six views", "one view (wide_view)"):
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| {name} | ") and ln.count("|") == 9)
        lifted, p95, p99, top, share, ratio, gain = (float(c) for c in row.strip("|").split("|")[1:])
        assert p95 <= p99 <= top and 0.0 <= share <= 1.0 and ratio == pytest.approx(top / lifted, abs=2e-3)
        assert gain == gain  # a number: both sides hold scenes
        assert sum(ln.startswith(f"| {name} | ") for ln in text.splitlines()) == 6  # its row and its five best scenes
    with pytest.raises(SystemExit, match="give more --scenes"):
        trap_search.main(["--model", "rmtl-fetch-tiny", "--scenes", "2", "--out", str(out)])

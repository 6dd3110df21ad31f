"""experiments/learnability/sync_runs.py copies a worktree's runs into the checkout (never a folder being
written) without removing what only the checkout has, drops a resume/ the finished run no longer has,
and makes machine paths portable."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sync_keeps_files_only_the_checkout_has_and_drops_a_finished_runs_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "learnability"))
    import sync_runs

    wt, repo, data = tmp_path / "wt", tmp_path / "repo", tmp_path / "data"
    runs = Path("results/x/runs")
    src = wt / runs / "r_s0"
    (src / "checkpoints" / "step_1").mkdir(parents=True)
    (src / "best").mkdir()
    (src / "best" / "meta.json").write_text(json.dumps({"out": f"{wt}/results/x/runs/r_s0", "data": f"{data}/s.zarr"}))
    (src / "summary.json").write_text("{}")
    (src / ".best.writing").mkdir()  # a policy being written as the sync runs: half of one, never copied
    (src / ".best.writing" / "model.zip").write_bytes(b"half")
    dst = repo / runs / "r_s0"
    (dst / "resume").mkdir(parents=True)  # committed while the run was going
    (dst / "resume" / "model.zip").write_bytes(b"old")
    (dst / "final").mkdir()
    (dst / "final" / "meta.json").write_text("{}")  # written here, not in the worktree
    monkeypatch.setattr(sync_runs, "REPO", repo)

    assert sync_runs.main([str(wt), "--runs", str(runs), "--data-dir", str(data)]) == 0
    assert not (dst / "resume").exists() and (dst / "final" / "meta.json").read_text() == "{}"
    assert not (dst / "checkpoints").exists() and (dst / "summary.json").is_file()
    assert not (dst / ".best.writing").exists()
    assert json.loads((dst / "best" / "meta.json").read_text()) == {"out": "results/x/runs/r_s0",
                                                                    "data": "$RMTL_DATA_DIR/s.zarr"}
    assert "kept 1 file(s) the worktree does not have: final/meta.json" in capsys.readouterr().out


def test_sync_skips_a_run_the_checkout_holds_further_along(tmp_path, monkeypatch, capsys):
    """A worktree made with stale committed copies of finished runs must not overwrite them."""
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "learnability"))
    import sync_runs

    wt, repo = tmp_path / "wt", tmp_path / "repo"
    runs = Path("results/x/runs")
    head = "step,episodes\n"
    for name, wt_steps, repo_steps, repo_done in (("stale_s0", [20, 40], [20, 40, 60], True),
                                                  ("newer_s1", [20, 40, 60], [20, 40], False)):
        src, dst = wt / runs / name, repo / runs / name
        src.mkdir(parents=True)
        dst.mkdir(parents=True)
        (src / "eval.csv").write_text(head + "".join(f"{s},5\n" for s in wt_steps))
        (dst / "eval.csv").write_text(head + "".join(f"{s},5\n" for s in repo_steps))
        if repo_done:
            (dst / "selection.json").write_text("{}")
    monkeypatch.setattr(sync_runs, "REPO", repo)

    assert sync_runs.main([str(wt), "--runs", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "skipped stale_s0" in out and "synced newer_s1" in out
    assert (repo / runs / "stale_s0" / "eval.csv").read_text().endswith("60,5\n")
    assert (repo / runs / "newer_s1" / "eval.csv").read_text().endswith("60,5\n")

"""Copies the learnability runs of the worktree that runs them into this checkout's results
(never checkpoints/ or tb/; a running run's resume/ comes along, a finished run has none), with the
machine's paths in their text files made portable (repository-relative, $RMTL_DATA_DIR/...). Files are
copied over this checkout's copy of a run: a file only this checkout has is kept and named (never a
whole run folder removed), except a resume/ the worktree's run no longer has (it finished since). A
run this checkout holds further along than the worktree (finished here, or evaluated at a later step:
a stale copy the worktree was made with) is skipped and named, never overwritten.

    python experiments/learnability/sync_runs.py /path/to/worktree [--data-dir /path/to/data] [--root DIR ...]
    python experiments/learnability/sync_runs.py /path/to/worktree --runs results/learnability/hybrids   # the hybrids

``--root``: other checkouts whose paths the runs recorded (the worktree whose code ran a lane when it
wrote into another's results, or the one a resumed run started in), made repository-relative too.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNS = Path("results/learnability/runs")
TEXT = {".json", ".yaml", ".csv", ".md", ".txt"}
SKIP = {"checkpoints", "tb", "sweep.lock"}
STAGED = (".tmp", ".writing", ".replaced")
"""Ends of the names a run writes through before renaming into place (half-written, never copied)."""


def progress(run: Path) -> tuple[bool, int]:
    """How far a run folder is: (finished: its selection written and no resume state left, the last
    step its eval.csv holds)."""
    finished = (run / "selection.json").is_file() and not (run / "resume").is_dir()
    rows = (run / "eval.csv").read_text().split("\n")[1:] if (run / "eval.csv").is_file() else []
    steps = [int(float(r.split(",")[0])) for r in rows if r.strip() and r.split(",")[0].strip()]
    return finished, max(steps, default=-1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("worktree", type=Path)
    ap.add_argument("--data-dir", type=Path, default=None, help="the data dir the runs wrote to (made $RMTL_DATA_DIR)")
    ap.add_argument("--root", type=Path, action="append", default=[], help="another checkout the runs' paths name")
    ap.add_argument("--runs", type=Path, default=RUNS, help="the runs' folder, relative to both checkouts")
    a = ap.parse_args(argv)
    roots = [str(p.resolve()) + "/" for p in (a.worktree, *a.root)] + [str(REPO) + "/"]
    for run in sorted((a.worktree / a.runs).iterdir()):
        if not run.is_dir():
            continue
        dst = REPO / a.runs / run.name
        here, there = progress(dst), progress(run)
        if here > there:
            print(f"skipped {run.name}: this checkout's copy is further along (finished {here[0]}, step {here[1]}) "
                  f"than the worktree's (finished {there[0]}, step {there[1]})")
            continue
        if (dst / "resume").is_dir() and not (run / "resume").is_dir():
            shutil.rmtree(dst / "resume")  # the run finished since: its resume state is gone there too
        # copied over what is here, never a whole folder removed: a file only this checkout has stays
        # (a run's final/ written here, an analysis beside it), and is named
        shutil.copytree(run, dst, dirs_exist_ok=True,
                        ignore=lambda d, names: [n for n in names if n in SKIP or n.endswith(STAGED)])
        only_here = sorted(str(f.relative_to(dst)) for f in dst.rglob("*")
                           if f.is_file() and not (run / f.relative_to(dst)).exists())
        if only_here:
            print(f"{run.name}: kept {len(only_here)} file(s) the worktree does not have: {', '.join(only_here[:5])}"
                  + (" ..." if len(only_here) > 5 else ""))
        for f in dst.rglob("*"):
            if f.is_file() and f.suffix in TEXT and (run / f.relative_to(dst)).is_file():
                text = f.read_text(errors="strict")
                for root in roots:
                    text = text.replace(root, "")
                if a.data_dir is not None:
                    text = text.replace(str(a.data_dir.resolve()) + "/", "$RMTL_DATA_DIR/")
                f.write_text(text)
        print(f"synced {run.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

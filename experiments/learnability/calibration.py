"""How well `rmtl qualify`'s P(teaches) predicted the pixel-level runs: every kept pixel run (Stage-1
VLM and hybrid runs, found under ``--runs``, each beside the report of its own configuration: the
micro-task prompts, or one single-prompt variant) and every replayed
stand-in's seed (the map's checks) beside the P(teaches) its scorer got from the map, with the
Brier score and a reliability plot. Rerun whenever a pixel run lands.

    python experiments/learnability/calibration.py [--reports results/learnability/qualify] [--runs results]

Outcome: taught = best-on-validation test success >= the map's ``teaches_at`` (0.5). P(teaches) is
read from each scorer's qualify report (``qualify_*.json``, verdicts re-read from the committed map
by ``qualify_table.py``); a run stopped before its steps is listed and left out of the score. The map
was fitted on 300k-step runs; the pixel runs are 600k (or 300k for the hybrids): said beside the score.
The map predicts an ``rmtl`` learner trained from scratch; the other runs on a scored model (ablations
such as ``no_curriculum``, controls warm-started from a taught policy) are listed beside it with their
learner and scored in a second Brier score over every run, not in the map's own.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from pipeline.qualify import LearnabilityMap, load_map
from qualify_table import pixel_runs  # this script's folder

REPO = Path(__file__).resolve().parents[2]
BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def points(reports: Path, runs_root: Path, fitted: LearnabilityMap) -> list[dict]:
    """One row per pixel run and per replay seed: scorer, run, learner, P(teaches), outcome, taught, counted
    (finished and given a P), predicted (the map's learner: ``rmtl`` from scratch)."""
    runs = {False: pixel_runs(runs_root), True: pixel_runs(runs_root, single_prompt=True)}
    out = []
    for path in sorted(reports.glob("qualify_*.json")):
        r = json.loads(path.read_text())
        p = r["map"].get("p_teaches")
        # A report scores one configuration (older reports: the micro-task reward); its runs are that
        # configuration's: the micro-task runs (with their ablations beside), or one single-prompt variant's.
        conf = r.get("configuration") or {"variant": "rmtl", "single_prompt": False}
        variant, one_score = conf.get("variant", "rmtl"), bool(conf.get("single_prompt"))
        for name, best, _, learner in runs[one_score].get((r.get("model") or "", tuple(r.get("vlm_micro_tasks") or ())), []):
            if one_score and learner.split()[0] != variant:
                continue
            finished = "stopped at" not in name
            out.append({"scorer": r["scorer"], "run": name, "learner": learner, "p": p, "outcome": best,
                        "taught": best >= fitted.teaches_at, "counted": finished and p is not None,
                        "predicted": learner == variant})
    for check in fitted.checks:
        for seed, best in enumerate(check.outcomes):
            out.append({"scorer": f"{check.name} (replayed degraded oracle)", "run": f"seed {seed}", "learner": "rmtl",
                        "p": (check.verdict or {})["p_teaches"], "outcome": best, "taught": best >= fitted.teaches_at,
                        "counted": True, "predicted": True})
    return out


def registered_at(path: Path) -> float | None:
    """When ``path`` was first committed (unix time), None when git does not know it."""
    r = subprocess.run(["git", "log", "--diff-filter=A", "--format=%ct", "--", str(path)], capture_output=True,
                       text=True, cwd=REPO)
    stamps = r.stdout.split()
    return float(stamps[-1]) if r.returncode == 0 and stamps else None


def prospective(results: Path, teaches_at: float) -> list[dict]:
    """The predictions registered before their runs: each ``<experiment>/PREDICTIONS.md`` under ``results``
    gives, per arm (the variant in backticks in its first cell), the verdict and P(teaches) [90%] (bold,
    third cell; none for an unmapped arm). One row per run of that arm under ``<experiment>/runs`` with a
    ``selection.json``; ``before`` says whether the run's first start is younger than the file's commit."""
    out = []
    for f in sorted(results.glob("*/PREDICTIONS.md")):
        at = registered_at(f)
        for line in f.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            arm = re.search(r"\(`([a-z_]+)`", cells[0]) if len(cells) >= 3 else None
            if not arm:
                continue
            prob = re.match(r"\*\*([0-9.]+) \[", cells[2])
            for sel in sorted((f.parent / "runs").glob(f"{arm.group(1)}_s*/selection.json")):
                starts = (sel.parent / "sweep_starts.jsonl").read_text().splitlines()
                started = json.loads(starts[0])["time"] if starts else None
                best = json.loads(sel.read_text())["best"]["test"]["success_rate"]
                run = sel.parent.resolve()
                out.append({"run": str(run.relative_to(REPO) if run.is_relative_to(REPO) else run), "arm": arm.group(1), "verdict": cells[1].strip("*"),
                            "p": float(prob.group(1)) if prob else None, "outcome": best,
                            "taught": best >= teaches_at, "registered": at, "started": started,
                            "before": at is not None and started is not None and at < started})
    return out


def prospective_lines(rows: list[dict]) -> list[str]:
    """The section of calibration.md for the registered predictions, apart from the retrospective ones."""
    def utc(t: float | None) -> str:
        return "?" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")

    scored_rows = [r for r in rows if r["p"] is not None and r["before"]]
    score = f"{brier(scored_rows):.3f} over {len(scored_rows)} run(s)" if scored_rows else "none yet"
    lines = ["", "## Prospective points: predictions registered before their runs", "",
             "P(teaches) as committed in an experiment's `PREDICTIONS.md` before its first run (the commit time "
             "against the run's first start), scored against the run as registered. Kept apart from the "
             f"retrospective score above. **Prospective Brier: {score}** (an arm registered without a "
             "probability is listed, not scored).", "",
             "| run | arm | registered verdict | P(teaches) | registered (UTC) | run started (UTC) | best test success "
             "| taught | (P - taught)^2 |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = "none" if r["p"] is None else f"{r['p']:.2f}"
        sq = f"{(r['p'] - r['taught']) ** 2:.3f}" if r["p"] is not None and r["before"] else "-"
        lines.append(f"| `{r['run']}` | {r['arm']} | {r['verdict']} | {p} | {utc(r['registered'])} | "
                     f"{utc(r['started'])}{'' if r['before'] else ' (not after the registration)'} | "
                     f"{r['outcome']:.3f} | {'yes' if r['taught'] else 'no'} | {sq} |")
    return lines


def scored(rows: list[dict], every_learner: bool = False) -> list[dict]:
    """The counted rows of the map's learner (``every_learner``: of every learner)."""
    return [r for r in rows if r["counted"] and (every_learner or r["predicted"])]


def brier(rows: list[dict]) -> float:
    return float(np.mean([(r["p"] - r["taught"]) ** 2 for r in rows])) if rows else float("nan")


def draw_bins(ax, p: np.ndarray, y: np.ndarray) -> None:
    """The reliability bins: the share taught per bin of P with its binomial SE and count."""
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        m = (p >= lo) & ((p < hi) if hi < 1 else (p <= hi))
        if m.any():
            ax.errorbar(p[m].mean(), y[m].mean(), yerr=np.sqrt(y[m].mean() * (1 - y[m].mean()) / m.sum()),
                        fmt="s", c="C3", capsize=3)
            ax.annotate(f"n={m.sum()}", (p[m].mean(), y[m].mean()), textcoords="offset points", xytext=(6, -10), fontsize=8)


def reliability_plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = scored(rows)
    p = np.array([r["p"] for r in c])
    y = np.array([float(r["taught"]) for r in c])
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], ls="--", c="grey", lw=1, label="perfect calibration")
    jitter = np.random.default_rng(0).uniform(-0.03, 0.03, len(y))
    ax.scatter(p, y + jitter, s=18, alpha=0.6, label="rmtl runs from scratch (taught 1 / not 0)")
    other = [r for r in scored(rows, every_learner=True) if not r["predicted"]]
    if other:  # ablations and warm-started controls: shown, not in the bins or the score
        ax.scatter([r["p"] for r in other], [float(r["taught"]) for r in other], s=30, marker="x", c="grey",
                   label="other learners (ablations, controls)")
    ax.legend(loc="upper left", fontsize=8)
    finish_reliability(fig, ax, p, y, path, xlabel="P(teaches) from rmtl qualify (before the run)",
                       ylabel="share taught (best test success >= 0.5)",
                       title=f"Calibration of the learnability map (Brier {brier(c):.3f})")


def finish_reliability(fig, ax, p: np.ndarray, y: np.ndarray, path: Path, **labels: str) -> None:
    """A reliability plot's bins, limits and labels, saved to ``path`` and closed."""
    import matplotlib.pyplot as plt

    draw_bins(ax, p, y)
    ax.set(xlim=(-0.05, 1.05), ylim=(-0.1, 1.1), **labels)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=Path, default=REPO / "results/learnability/qualify")
    ap.add_argument("--runs", type=Path, default=REPO / "results")
    ap.add_argument("--map", type=Path, default=None, help="a fitted map (default: the task's, shipped with its package)")
    ap.add_argument("--out", type=Path, default=REPO / "results/learnability/calibration.md")
    a = ap.parse_args(argv)
    fitted = load_map(a.map)
    if not fitted:
        raise SystemExit(f"error: no fitted map at {a.map}: run 'rmtl qualify fit-map' first")
    rows = points(a.reports, a.runs, fitted)
    counted, every = scored(rows), scored(rows, every_learner=True)
    png = a.out.with_suffix(".png")
    reliability_plot(rows, png)
    lines = ["# Calibration: P(teaches) before each pixel-level run, and what the run did", "",
             "Written by `python experiments/learnability/calibration.py` (rerun when a pixel run lands). Taught: "
             f"best-on-validation test success >= {fitted.teaches_at}. P(teaches): the scorer's `rmtl qualify` verdict "
             "from the committed map (fitted on 300k-step degraded-oracle runs; the pixel runs ran 600k, the hybrids "
             "300k). Runs stopped before their steps are listed, not scored.", "",
             f"**Brier score {brier(counted):.3f}** over {len(counted)} runs (a constant 0.5 scores 0.250; "
             f"the base rate {np.mean([r['taught'] for r in counted]):.2f} as a constant scores "
             f"{np.mean([(np.mean([q['taught'] for q in counted]) - r['taught']) ** 2 for r in counted]):.3f}). "
             f"Reliability plot: `{png.name}`. These are the runs the map predicts: an `rmtl` learner from scratch. "
             f"Over every listed run, ablations and warm-started controls too: Brier {brier(every):.3f} "
             f"over {len(every)} runs.", "",
             "| scorer | run | learner | P(teaches) | best test success | taught | scored |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        p = "n/a" if r["p"] is None else f"{r['p']:.2f}"
        in_score = "no" if not r["counted"] else "yes" if r["predicted"] else "every-run score only"
        lines.append(f"| {r['scorer']} | {r['run']} | {r['learner']} | {p} | {r['outcome']:.3f} | "
                     f"{'yes' if r['taught'] else 'no'} | {in_score} |")
    lines += prospective_lines(prospective(a.runs, fitted.teaches_at))
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The structure claims with a pixel reward (results/pixel_structure/RULE.md) from the kept runs.

    python experiments/pixel/summarize_structure.py [--runs results/pixel_structure/runs] \
        [--reference results/pixel_rmtl/runs] [--out results/pixel_structure]

The reference arm is the committed pixel RMTL seeds; each arm (no curriculum, no phase input) is
compared with it by the seed-pair rule. Writes ``runs.md`` / ``runs.csv`` (best-on-validation,
final and last-5 test success with 95% Wilson intervals, env steps, wall time, commit),
``decision.txt`` (open until every seed of both arms has reached 600k) and the Fig. 5 / Fig. 6
report of the Stage-1 arms beside rule-only's seeds (``report/``, ``rmtl report``).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from rmtl.train.eval.paired import paired_seed_verdict
from rmtl.train.eval.selection import load_selection
from rmtl.train.report.runs import load_run
from rmtl.train.report.stage1 import stage1_report
from summarize import SEEDS, run_row, seed_runs  # this script's folder

REPO = Path(__file__).resolve().parents[2]
MODEL = "rmtl-fetch-fast-r6-labelled"
ARMS = {"rmtl": "pixel RMTL (reference)", "no_curriculum": "no curriculum", "no_phase_input": "no phase input"}
CLAIMS = {"no_curriculum": "the reverse curriculum helps", "no_phase_input": "the phase input helps"}


def with_ci(d: Path, which: str) -> str:
    """``rate [lo, hi]`` of the run's best-on-validation or final test evaluation (selection.json's
    Wilson interval over its 200 episodes)."""
    sel = load_selection(d)
    if not sel:
        return "-"
    t = sel[which]["test"]
    return f"{t['success_rate']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}]"


def provenance(d: Path) -> tuple[str, str]:
    """(wall time in hours, commit) from the run's run.json."""
    run = json.loads((d / "run.json").read_text()) if (d / "run.json").is_file() else {}
    summary = json.loads((d / "summary.json").read_text()) if (d / "summary.json").is_file() else {}
    wall = summary.get("wall_seconds") or run.get("wall_seconds")
    return (f"{wall / 3600:.2f}" if wall else "-"), str(run.get("git_commit", "-"))[:7]


def write_tables(rows: dict[str, list[tuple[Path, dict]]], labels: dict[str, str], header: str,
                 comparisons: list[tuple[str, str, str]], out: Path) -> tuple[list[str], list[str]]:
    """``runs.md`` / ``runs.csv`` of every arm's seed runs and ``decision.txt``: each comparison
    (claim, arm A, arm B) by the seed-pair rule on best-on-validation test success, open until every
    seed of both arms has finished. Returns (table lines, decision lines)."""
    lines = [header, "", "| arm | seed | env steps | best on validation | best step | final | last 5 evals | wall h | commit |",
             "|---|---|---|---|---|---|---|---|---|"]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["arm", "run", "seed", "steps", "finished", "best_test", "best_step", "final_test", "last5",
                    "wall_hours", "commit"])
        for arm, arm_rows in rows.items():
            for d, r in arm_rows:
                wall, commit = provenance(d)
                state = "" if r["finished"] else " (running)"
                last5 = "-" if r["last5"] is None else f"{r['last5']:.3f}"
                lines.append(f"| {labels[arm]} | {r['seed']} | {r['steps']:,}{state} | {with_ci(d, 'best')} "
                             f"| {r.get('best_step', '-')} | {with_ci(d, 'final')} | {last5} | {wall} | {commit} |")
                w.writerow([arm, r["run"], r["seed"], r["steps"], r["finished"], r.get("best"), r.get("best_step"),
                            r.get("final"), r["last5"], wall, commit])
    (out / "runs.md").write_text("\n".join(lines) + "\n")
    decided = []
    for i, (claim, a, b) in enumerate(comparisons, 1):
        sa, sb = ({r["seed"]: r["best"] for _, r in rows[arm] if r["finished"]} for arm in (a, b))
        v = paired_seed_verdict(sa, sb, SEEDS)
        if v["verdict"] == "open":
            decided.append(f"{i}. {claim} ({labels[a]} vs {labels[b]}): open (seeds finished: {labels[a]} "
                           f"{sorted(sa)}, {labels[b]} {sorted(sb)})")
        else:
            decided.append(f"{i}. {claim} ({labels[a]} vs {labels[b]}): {v['verdict']} (d = {v['d']:+.3f}; "
                           f"{labels[a]} better on {v['a_wins']} of 3 seed pairs, {labels[b]} on {v['b_wins']})")
    (out / "decision.txt").write_text("\n".join(decided) + "\n")
    return lines, decided


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=REPO / "results/pixel_structure/runs")
    ap.add_argument("--reference", type=Path, default=REPO / "results/pixel_rmtl/runs")
    ap.add_argument("--rule-only", type=Path, default=REPO / "results/oracle_structure/runs")
    ap.add_argument("--out", type=Path, default=REPO / "results/pixel_structure")
    a = ap.parse_args(argv)
    dirs = {"rmtl": seed_runs(a.reference, "rmtl"), **{arm: seed_runs(a.runs, arm) for arm in CLAIMS}}
    rows = {arm: [(d, run_row(d)) for d in ds] for arm, ds in dirs.items()}
    header = (f"Stage-1 arms on `{MODEL}` (labelled: trained with the evaluated prompts; these arms compare no "
              "prompts). Test success over 200 episodes with 95% Wilson intervals.")
    lines, decided = write_tables(rows, ARMS, header, [(claim, "rmtl", arm) for arm, claim in CLAIMS.items()], a.out)
    named = [{**load_run(d), "variant": f"{arm} on {MODEL} (labelled)"} for arm, ds in dirs.items() for d in ds]
    rule_only = seed_runs(a.rule_only, "rule_only")
    if named:
        stage1_report([*named, *rule_only], a.out / "report")
    print("\n".join([*lines, "", *decided]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

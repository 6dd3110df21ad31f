"""Pixel RMTL's tables and decisions (results/pixel_rmtl/RULE.md) from its kept runs.

    python experiments/pixel/summarize.py --qualify results/pixel_rmtl/qualify_<model>.json \
        [--runs results/pixel_rmtl/runs] [--out results/pixel_rmtl]

Reads each run's ``selection.json`` (best on validation and final, 200 test episodes) and
``eval.csv`` (last 5 periodic evaluations), beside rule-only's committed seeds
(results/oracle_structure/runs/rule_only_s*). Writes ``runs.md`` / ``runs.csv``, ``decision.txt``
(the three decisions of the rule; open until every seed has reached the rule's steps) and the
Fig. 5-style report of both arms (``report/``, ``rmtl report``). The model's verdict is read again
from the committed map, as `rmtl qualify` would give it now.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from pipeline.qualify import load_map, scorer_verdict
from rmtl.train.eval.paired import paired_seed_verdict
from rmtl.train.eval.selection import last_evaluations, load_selection
from rmtl.train.report.runs import load_run
from rmtl.train.report.stage1 import stage1_report
from rmtl.train.run.csv_log import read_csv

REPO = Path(__file__).resolve().parents[2]
STEPS = 600_000
SEEDS = (0, 1, 2)
TEACHES_AT = 0.5
"""Best-on-validation test success at which a seed counts as taught (the map's 'teaches')."""


def run_row(d: Path) -> dict:
    """One run's figures: env steps, finished, best-on-validation and final test success, last 5."""
    summary = json.loads((d / "summary.json").read_text()) if (d / "summary.json").is_file() else {}
    ev = read_csv(d / "eval.csv") if (d / "eval.csv").is_file() else []
    steps = int(summary.get("env_steps") or (ev[-1]["timesteps"] if ev else 0))
    sel = load_selection(d)
    row = {"run": d.name, "seed": int(d.name.rsplit("_s", 1)[1]), "steps": steps,
           "finished": steps >= STEPS and not (d / "resume").exists() and sel is not None,
           "last5": last_evaluations(ev).get("mean_success_rate") if ev else None}
    if sel:
        row.update(best=sel["best"]["test"]["success_rate"], best_step=sel["best"]["num_timesteps"],
                   final=sel["final"]["test"]["success_rate"])
    return row


def seed_runs(root: Path, prefix: str) -> list[Path]:
    return sorted(p for p in root.glob(f"{prefix}_s[0-9]*") if p.is_dir())


def decisions(pixel: list[dict], rule_only: list[dict], verdict: dict) -> list[str]:
    """RULE.md's three decisions, each open until all its seeds are finished."""
    done = {r["seed"]: r["best"] for r in pixel if r["finished"]}
    base = {r["seed"]: r["best"] for r in rule_only if r["finished"]}
    lines = []
    if all(s in done for s in SEEDS):
        taught = sum(done[s] >= TEACHES_AT for s in SEEDS)
        lines.append(f"1. a learner learns from pixels: {'yes' if taught >= 2 else 'no'} ({taught} of 3 seeds reach "
                     f"best-on-validation test success >= {TEACHES_AT})")
    else:
        lines.append(f"1. a learner learns from pixels: open (seeds finished: {sorted(done)})")
    v = paired_seed_verdict(done, base, SEEDS)
    if v["verdict"] == "open":
        lines.append(f"2. pixel RMTL vs rule-only: open (pixel seeds {sorted(done)}, rule-only seeds {sorted(base)} finished)")
    else:
        lines.append(f"2. pixel RMTL vs rule-only: {v['verdict']} (d = {v['d']:+.3f}; pixel better on {v['a_wins']} of 3 "
                     f"seed pairs, rule-only on {v['b_wins']})")
    said = verdict["verdict"] + (f", P(teaches) {verdict['p_teaches']:.2f}, predicted test success "
                                 f"{verdict['predicted_test_success']:.2f}" if "p_teaches" in verdict else "")
    if all(s in done for s in SEEDS):
        taught = sum(done[s] >= TEACHES_AT for s in SEEDS)
        miss = (verdict["verdict"] == "teaches" and taught == 0) or (verdict["verdict"] == "does not teach" and taught == 3)
        lines.append(f"3. the map's prediction: {said}; outcome {taught} of 3 seeds taught: {'a miss' if miss else 'no miss'}")
    else:
        lines.append(f"3. the map's prediction: {said}; outcome open")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=REPO / "results/pixel_rmtl/runs")
    ap.add_argument("--prefix", default="rmtl", help="pixel runs are <prefix>_s<seed> (the sweep names them rmtl_s<seed>)")
    ap.add_argument("--rule-only", type=Path, default=REPO / "results/oracle_structure/runs")
    ap.add_argument("--qualify", type=Path, required=True, help="the model's `rmtl qualify` report (JSON)")
    ap.add_argument("--out", type=Path, default=REPO / "results/pixel_rmtl")
    a = ap.parse_args(argv)
    pixel_dirs, rule_dirs = seed_runs(a.runs, a.prefix), seed_runs(a.rule_only, "rule_only")
    pixel, rule_only = [run_row(d) for d in pixel_dirs], [run_row(d) for d in rule_dirs]
    report = json.loads(a.qualify.read_text())
    verdict = scorer_verdict(report["pooled"]["value"], report["behaviours_at_or_above_expert"], load_map())
    f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    lines = [f"Pixel RMTL on `{report['scorer']}` (qualify verdict: {verdict['verdict']}) beside rule-only; test "
             "success over 200 episodes.", "",
             "| arm | seed | env steps | best on validation | best step | final | last 5 evals |", "|---|---|---|---|---|---|---|"]
    a.out.mkdir(parents=True, exist_ok=True)
    with open(a.out / "runs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["arm", "run", "seed", "steps", "finished", "best_test", "best_step", "final_test", "last5"])
        for arm, rows in (("pixel rmtl", pixel), ("rule-only", rule_only)):
            for r in rows:
                state = "" if r["finished"] else " (running)"
                lines.append(f"| {arm} | {r['seed']} | {r['steps']}{state} | {f(r.get('best'))} | {r.get('best_step', '-')} "
                             f"| {f(r.get('final'))} | {f(r['last5'])} |")
                w.writerow([arm, r["run"], r["seed"], r["steps"], r["finished"], r.get("best"), r.get("best_step"),
                            r.get("final"), r["last5"]])
    (a.out / "runs.md").write_text("\n".join(lines) + "\n")
    decided = decisions(pixel, rule_only, verdict)
    (a.out / "decision.txt").write_text("\n".join(decided) + "\n")
    if pixel_dirs:
        # The pixel arm named by its model in the figure and tables (the variant alone says only "rmtl").
        named = [{**load_run(d), "variant": f"rmtl on {report['model'] or report['scorer']}"} for d in pixel_dirs]
        stage1_report([*named, *rule_dirs], a.out / "report")
    print("\n".join([*lines, "", *decided]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

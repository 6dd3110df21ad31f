"""The sweep table and its decision (DECISION_RULE.md), and the structural table, from the kept runs.

    python experiments/oracle_structure/summarize.py            # from the repository root

Reads runs/<variant>_s<seed>/ (eval.csv, validation.csv, selection.json, best/). A finished run
without selection.json (started before runs wrote it) gets it here, from its local final
checkpoint. Writes sweep.csv / sweep.md, structure.csv / structure.md and prints the decision.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from rmtl.train.eval.committed import select_kept_run
from rmtl.train.eval.paired import paired_seed_verdict
from rmtl.train.run.csv_log import read_csv
from rmtl.train.run.run_dir import latest_checkpoint
from rmtl.train.eval.selection import last_evaluations, load_selection

HERE = Path(__file__).resolve().parents[2] / "results" / "oracle_structure"
"""Where the kept runs are and where the tables go."""
RUNS = HERE / "runs"
SWEEP = ("oracle_sweep_level_only", "oracle_sweep_trend_momentum", "oracle_sweep_trend_momentum_drop")
STRUCTURE = ("oracle_rmtl", "rule_only", "oracle_no_curriculum", "oracle_no_phase_input", "dense_reference")
SEEDS = (0, 1, 2)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776}


def run_row(d: Path, budget: int) -> dict | None:
    if not (d / "eval.csv").is_file():
        return None
    ev = read_csv(d / "eval.csv")
    steps = int(ev[-1]["timesteps"]) if ev else 0
    sel = load_selection(d)
    finished = steps >= budget and not (d / "resume").exists()
    if finished and sel is None and (d / "checkpoints" / "latest.txt").is_file():
        sel = select_kept_run(d, latest_checkpoint(d))
    last = last_evaluations(ev)
    row = {"run": d.name, "steps": steps, "finished": finished,
           "final": ev[-1]["success_rate"] if ev else None, "final_ci": (ev[-1]["ci_low"], ev[-1]["ci_high"]) if ev else None,
           "last5": last.get("mean_success_rate"), "last5_ci": (last.get("ci_low"), last.get("ci_high"))}
    if sel:
        b = sel["best"]
        row.update(best=b["test"]["success_rate"], best_ci=(b["test"]["ci_low"], b["test"]["ci_high"]),
                   best_step=b["num_timesteps"], best_val=b["validation"]["success_rate"],
                   final_test=sel["final"]["test"]["success_rate"],
                   final_test_ci=(sel["final"]["test"]["ci_low"], sel["final"]["test"]["ci_high"]))
    return row


def mean_ci(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return m, T95[len(xs) - 1] * sd / math.sqrt(len(xs))


def fmt(x, ci=None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" + (f" ({ci[0]:.3f}-{ci[1]:.3f})" if ci and ci[0] is not None else "")


def table(variants, budget, name) -> dict[str, list[dict]]:
    out, lines = {}, ["| variant | seed | env steps | final (test, 200) | best on validation (test, 200) | best step | last 5 evals |",
                      "|---|---|---|---|---|---|---|"]
    for v in variants:
        rows = []
        for s in SEEDS:
            r = run_row(RUNS / f"{v}_s{s}", budget)
            if r is None:
                lines.append(f"| {v} | {s} | not run | | | | |")
                continue
            rows.append(r)
            state = "" if r["finished"] else " (running)"
            lines.append(f"| {v} | {s} | {r['steps']}{state} | {fmt(r.get('final_test'), r.get('final_test_ci'))} "
                         f"| {fmt(r.get('best'), r.get('best_ci'))} | {r.get('best_step', '-')} | {fmt(r['last5'], r['last5_ci'])} |")
        done = [r for r in rows if r["finished"] and r.get("best") is not None]
        if done:
            m, h = mean_ci([r["best"] for r in done])
            spread = f" ± {h:.3f}" if len(done) > 1 else " (one seed: no interval)"
            lines.append(f"| **{v}** | mean of {len(done)} finished | | | **{m:.3f}{spread}** | | |")
        out[v] = rows
    (HERE / f"{name}.md").write_text("\n".join(lines) + "\n\nMean ± half-width of the 95% t-interval over finished "
                                     "seeds; per-run intervals are Wilson 95%.\n")
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "run", "steps", "finished", "final_test", "best_test", "best_step", "best_validation", "last5"])
        for v, rows in out.items():
            for r in rows:
                w.writerow([v, r["run"], r["steps"], r["finished"], r.get("final_test"), r.get("best"), r.get("best_step"),
                            r.get("best_val"), r["last5"]])
    return out


def decide(sweep: dict[str, list[dict]]) -> str:
    means = {}
    for v in SWEEP:
        done = [r["best"] for r in sweep.get(v, []) if r["finished"] and r.get("best") is not None]
        if len(done) < len(SEEDS):
            return f"open: {v} has {len(done)} of {len(SEEDS)} seeds finished at 300k (DECISION_RULE.md: undecided until all have)"
        means[v] = sum(done) / len(done)
    a, b, c = (means[v] for v in SWEEP)
    keep_tm = b >= a - 0.05
    keep_drop = keep_tm and c >= a - 0.05
    return (f"mean best-on-validation: (a) {a:.3f}, (b) {b:.3f}, (c) {c:.3f}; trend and momentum "
            f"{'stay' if keep_tm else 'leave the default'}; the drop penalty {'stays' if keep_drop else 'leaves the default'}")


CLAIMS = (("the scorer's signal teaches beyond the rule's phase", "rule_only"),
          ("the reverse curriculum helps", "oracle_no_curriculum"),
          ("the phase input helps", "oracle_no_phase_input"))


def decide_structure(rows: dict[str, list[dict]], a: str = "oracle_rmtl") -> list[str]:
    """STRUCTURE_RULE.md for each claim: decided only when 3 seeds of both sides finished at 600k."""
    def best(v: str) -> dict[int, float]:
        return {int(r["run"].rsplit("_s", 1)[1]): r["best"] for r in rows.get(v, [])
                if r["finished"] and r.get("best") is not None}

    out = []
    for claim, b in CLAIMS:
        ra, rb = best(a), best(b)
        v = paired_seed_verdict(ra, rb, SEEDS)
        if v["verdict"] == "open":
            out.append(f"{claim} ({a} vs {b}): open ({a} seeds {sorted(ra)}, {b} seeds {sorted(rb)} finished)")
            continue
        out.append(f"{claim} ({a} vs {b}): {v['verdict']} (d = {v['d']:+.3f}; {a} better on {v['a_wins']} of 3 seed "
                   f"pairs, {b} on {v['b_wins']})")
    return out


if __name__ == "__main__":
    sweep = table(SWEEP, 300_000, "sweep")
    structure = table(STRUCTURE, 600_000, "structure")
    decision = decide(sweep)
    (HERE / "decision.txt").write_text(decision + "\n")
    print(decision)
    claims = decide_structure(structure)
    (HERE / "structure_decision.txt").write_text("\n".join(claims) + "\n")
    print("\n".join(claims))

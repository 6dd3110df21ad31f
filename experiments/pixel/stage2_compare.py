"""Stage 2 over the three pixel workers: the arms of results/pixel_structure/RULE.md on the same 200
test episodes per worker, per worker and pooled, and the rule's decision.

    rmtl sweep experiments/pixel/pixel_stage2.yaml --local      # the Stage-2 runs and the controls
    python experiments/pixel/stage2_compare.py [--episodes 200]  # from the repository root

Per worker seed N (``results/pixel_rmtl/runs/rmtl_sN/best``, labelled model): the Stage-2 run
``results/pixel_structure/stage2/manager_sN``, the rule-continued control
``.../stage2/rmtl_rule_continued_sN`` and the no-phase-input run ``results/pixel_structure/runs/
no_phase_input_sN`` where they exist (arms of rmtl.train.stage2.compare). A worker's arms are
evaluated once and kept in ``stage2/compare_wN.json`` (``--again`` evaluates again).

The manager helps if, pooled over the three workers, it beats worker + rule and the rule-continued
control by >= 0.05 each with an exact two-sided sign test p < 0.05, and is ahead of both on at least
2 of the 3 workers; it hurts if it is below worker + rule by >= 0.05 pooled with p < 0.05; otherwise no
difference is shown. Until all three workers have both arms the decision is open.
Writes stage2.json / stage2.csv / stage2.md / stage2.png to results/pixel_structure/.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from rmtl.train.eval.selection import TEST_SEED
from rmtl.train.report import PAPER_AGREEMENT, PAPER_FIG7
from rmtl.tasks import get_task
from rmtl.train.stage2.compare import ARM_LABELS, WorkerArms, compare, evaluate_arms, phase_shares, pooled

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "results" / "pixel_structure"
WORKERS = ROOT / "results" / "pixel_rmtl" / "runs"
SEEDS = (0, 1, 2)
MARGIN, ALPHA, EXPLOIT = 0.05, 0.05, 0.10
PAPER = {k: v for k, v in PAPER_FIG7.items() if k in ARM_LABELS}


def worker_arms(seed: int) -> WorkerArms:
    return WorkerArms(worker=WORKERS / f"rmtl_s{seed}" / "best", stage2=HERE / "stage2" / f"manager_s{seed}",
                      rule_continued=HERE / "stage2" / f"rmtl_rule_continued_s{seed}",
                      no_phase=HERE / "runs" / f"no_phase_input_s{seed}")


def decide(per_worker: dict[str, dict], pool: dict) -> str:
    """The rule's words for the manager (RULE.md, "Stage 2 over each pixel worker")."""
    vs_rule, vs_cont = compare(pool, "worker_manager", "worker_rule"), compare(pool, "worker_manager", "rule_continued")
    if len(per_worker) < len(SEEDS) or vs_cont is None:
        return (f"open: {len(per_worker)} of {len(SEEDS)} workers have a Stage-2 run"
                + ("" if vs_cont else "; the rule-continued control is missing for at least one"))
    ahead = sum(a["worker_manager"]["success_rate"] > max(a["worker_rule"]["success_rate"],
                                                          a["rule_continued"]["success_rate"])
                for a in per_worker.values())
    if all(c["difference"] >= MARGIN and c["p"] < ALPHA for c in (vs_rule, vs_cont)) and ahead >= 2:
        return "the manager helps"
    if vs_rule["difference"] <= -MARGIN and vs_rule["p"] < ALPHA:
        return "the manager hurts"
    return "no difference shown"


def _row(label: str, a: dict) -> str:
    ag = a.get("step_agreement_rule", float("nan"))
    dec = a.get("decision_agreement_rule", float("nan"))
    agree = "" if ag != ag else f"{ag:.3f}" + (f" / {dec:.3f}" if dec == dec else "")
    return f"| {label} | {a['success_rate']:.3f} ({a['ci'][0]:.3f}-{a['ci'][1]:.3f}) | {agree} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--again", action="store_true", help="evaluate every worker's arms again")
    args = ap.parse_args(argv)
    per_worker: dict[str, dict] = {}
    for seed in SEEDS:
        arms = worker_arms(seed)
        cache = HERE / "stage2" / f"compare_w{seed}.json"
        if not arms.stage2.is_dir():
            print(f"worker {seed}: no Stage-2 run at {arms.stage2.relative_to(ROOT)} yet")
            continue
        if cache.is_file() and not args.again and json.loads(cache.read_text()).get("episodes") == args.episodes:
            per_worker[f"w{seed}"] = json.loads(cache.read_text())["arms"]
            continue
        got = evaluate_arms(arms, args.episodes, TEST_SEED, echo=lambda s, n=seed: print(f"worker {n}: {s}", flush=True))
        for a in got.values():
            a["checkpoint"] = str(Path(a["checkpoint"]).relative_to(ROOT))
        cache.write_text(json.dumps({"episodes": args.episodes, "test_seed": TEST_SEED, "arms": got}, indent=1))
        per_worker[f"w{seed}"] = got
    if not per_worker:
        print("no Stage-2 run yet: rmtl sweep experiments/pixel/pixel_stage2.yaml --local")
        return 1
    pool = pooled(per_worker)
    verdict = decide(per_worker, pool)
    comps = {f"{a}_vs_{b}": compare(pool, a, b) for a, b in (("worker_manager", "worker_rule"),
                                                              ("worker_manager", "rule_continued"),
                                                              ("worker_manager", "stage2_worker_rule"))}
    phases = list(get_task().micro_tasks.names)
    share, rule_share = phase_shares(pool["worker_manager"], phases)
    exploits = share[phases[-1]] - rule_share[phases[-1]] >= EXPLOIT
    out = {"episodes": args.episodes, "test_seed": TEST_SEED, "model": "rmtl-fetch-fast-r6-labelled (labelled)",
           "workers": {k: {n: {f: v for f, v in a.items() if f != "episode_success"} for n, a in arms.items()}
                       for k, arms in per_worker.items()},
           "pooled": {n: {f: v for f, v in a.items() if f != "episode_success"} for n, a in pool.items()},
           "comparisons_pooled": comps, "verdict": verdict, "manager_phase_share": share,
           "rule_phase_share_same_states": rule_share, "manager_exploits_last_phase": bool(exploits),
           "paper": PAPER, "paper_agreement": PAPER_AGREEMENT}
    (HERE / "stage2.json").write_text(json.dumps(out, indent=1))
    with (HERE / "stage2.csv").open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["worker", "arm", "successes", "episodes", "success_rate", "ci_low", "ci_high",
                     "step_agreement_rule", "decision_agreement_rule", "checkpoint"])
        for k, arms in [*per_worker.items(), ("pooled", pool)]:
            for n, a in arms.items():
                wr.writerow([k, n, a["successes"], a["episodes"], round(a["success_rate"], 4), round(a["ci"][0], 4),
                             round(a["ci"][1], 4), round(a["step_agreement_rule"], 4),
                             round(a["decision_agreement_rule"], 4), a.get("checkpoint", "")])
    lines = [f"# Stage 2 over the pixel workers (labelled `rmtl-fetch-fast-r6-labelled`; {args.episodes} test "
             f"episodes per worker, seeds {TEST_SEED}+i)", ""]
    for k, arms in [*per_worker.items(), ("pooled", pool)]:
        lines += [f"## {'pooled over ' + str(len(per_worker)) + ' workers' if k == 'pooled' else 'worker seed ' + k[1:]}",
                  "", "| arm | success (95% CI) | agreement with the rule (steps / decisions) |", "|---|---|---|"]
        lines += [_row(ARM_LABELS[n], a) for n, a in arms.items()] + [""]
    lines += ["Pooled paired sign tests (episodes where only one arm succeeded):", ""]
    lines += [f"- {c['a']} vs {c['b']}: difference {c['difference']:+.3f}, only A {c['a_only']}, only B {c['b_only']}, "
              f"p = {c['p']:.3g}" for c in comps.values() if c]
    lines += ["", f"**Decision (RULE.md):** {verdict}.", "",
              "Manager's share of steps per phase, pooled (the rule's on the same states): "
              + ", ".join(f"{n} {share[n]:.3f} ({rule_share[n]:.3f})" for n in phases)
              + f". Exploits the last phase's band (share >= rule's + {EXPLOIT}): {'yes' if exploits else 'no'}.", ""]
    (HERE / "stage2.md").write_text("\n".join(lines))
    _plot(per_worker, pool, HERE / "stage2.png")
    print("\n".join(lines))
    return 0


def _plot(per_worker: dict, pool: dict, path: Path) -> None:
    import numpy as np
    from matplotlib.figure import Figure

    groups = [*per_worker.items(), ("pooled", pool)]
    arms = [k for k in ARM_LABELS if any(k in a for _, a in groups)]
    fig = Figure(figsize=(9, 3.8))
    ax = fig.add_subplot()
    width = 0.8 / len(arms)
    for j, k in enumerate(arms):
        xs = [i + (j - (len(arms) - 1) / 2) * width for i, (_, a) in enumerate(groups) if k in a]
        ys = [a[k]["success_rate"] for _, a in groups if k in a]
        lo = [y - a[k]["ci"][0] for y, (_, a) in zip(ys, [g for g in groups if k in g[1]])]
        hi = [a[k]["ci"][1] - y for y, (_, a) in zip(ys, [g for g in groups if k in g[1]])]
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=ARM_LABELS[k])
    ax.set_xticks(np.arange(len(groups)), [f"worker {k[1:]}" if k != "pooled" else "pooled" for k, _ in groups])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("test success (95% CI)")
    ax.set_title("Fig. 7 with pixels: Stage 2 over each pixel worker (labelled model), same test episodes")
    ax.legend(fontsize=7, ncol=3, loc="lower center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())

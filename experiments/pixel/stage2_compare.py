"""Stage 2 over the three pixel workers: RULE.md's decision on the arms that ``rmtl report --stage 2``
measures over the three Stage-2 runs (results/pixel_structure/RULE.md, "Stage 2 over each pixel worker").

    rmtl sweep experiments/pixel/pixel_stage2.yaml --local      # the Stage-2 runs and the controls
    python experiments/pixel/stage2_compare.py [--again]        # from the repository root

It runs, for the workers whose Stage-2 run exists (``results/pixel_structure/stage2/manager_sN`` over
``results/pixel_rmtl/runs/rmtl_sN/best``, the labelled model)::

    rmtl report --stage 2 results/pixel_structure/stage2/manager_s{0,1,2} \
        --rule-continued results/pixel_structure/stage2/rmtl_rule_continued_s{0,1,2} \
        --no-phase results/pixel_structure/runs/no_phase_input_s{0,1,2} \
        --episodes 200 --seed 3000000 --out results/pixel_structure/stage2/report

(``--no-phase`` once those runs exist), which writes Fig. 7 per worker and pooled (``fig7.png/.md/.csv/
.json``), then applies the rule: the manager helps if, pooled over the three workers, it beats worker
+ rule and the rule-continued control by >= 0.05 each with an exact two-sided sign test p < 0.05, and
is ahead of both on at least 2 of the 3 workers; it hurts if it is below worker + rule by >= 0.05
pooled with p < 0.05; otherwise no difference is shown. Until all three workers have both arms the
decision is open. Writes ``results/pixel_structure/stage2_decision.txt``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rmtl.train.eval.selection import TEST_SEED

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "results" / "pixel_structure"
STAGE2 = HERE / "stage2"
SEEDS = (0, 1, 2)
MARGIN, ALPHA, EXPLOIT = 0.05, 0.05, 0.10


def decide(info: dict, finished_controls: int) -> str:
    """The rule's words for the manager, from ``fig7.json`` (open until every worker has a Stage-2 run and a
    finished, selected rule-continued control)."""
    workers, comps = info["workers"], info["comparisons_pooled"]
    vs_rule, vs_cont = comps.get("worker_manager_vs_worker_rule"), comps.get("worker_manager_vs_rule_continued")
    if len(workers) < len(SEEDS) or finished_controls < len(SEEDS) or vs_cont is None:
        return (f"open: {len(workers)} of {len(SEEDS)} workers have a Stage-2 run, {finished_controls} a finished "
                f"rule-continued control")
    ahead = sum(w["worker_manager"]["success_rate"] > max(w["worker_rule"]["success_rate"],
                                                          w["rule_continued"]["success_rate"]) for w in workers.values())
    if all(c["difference"] >= MARGIN and c["p"] < ALPHA for c in (vs_rule, vs_cont)) and ahead >= 2:
        return "the manager helps"
    if vs_rule["difference"] <= -MARGIN and vs_rule["p"] < ALPHA:
        return "the manager hurts"
    return "no difference shown"


def main(argv: list[str] | None = None) -> int:
    from rmtl.cli import run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--again", action="store_true", help="evaluate every worker's arms again")
    args = ap.parse_args(argv)
    seeds = [s for s in SEEDS if (STAGE2 / f"manager_s{s}" / "config.yaml").is_file()]
    if not seeds:
        print("no Stage-2 run yet: rmtl sweep experiments/pixel/pixel_stage2.yaml --local")
        return 1
    rel = lambda p: str(p.relative_to(ROOT))  # noqa: E731  (the command as a user types it, from the root)
    argv_report = ["report", "--stage", "2", *(rel(STAGE2 / f"manager_s{s}") for s in seeds)]
    controls = [STAGE2 / f"rmtl_rule_continued_s{s}" for s in seeds]
    if all(c.is_dir() for c in controls):
        argv_report += ["--rule-continued", *map(rel, controls)]
    no_phase = [HERE / "runs" / f"no_phase_input_s{s}" for s in seeds]
    if all((p / "selection.json").is_file() for p in no_phase):
        argv_report += ["--no-phase", *map(rel, no_phase)]
    argv_report += ["--episodes", str(args.episodes), "--seed", str(TEST_SEED), "--out", rel(STAGE2 / "report")]
    argv_report += ["--again"] if args.again else []
    print("rmtl " + " ".join(argv_report), flush=True)
    if len(seeds) == 1 and "--rule-continued" not in argv_report:
        print("one Stage-2 run and no control yet: nothing to compare across workers")
        return 1
    status = run(argv_report)
    if status:
        return status
    info = json.loads((STAGE2 / "report" / "fig7.json").read_text())
    verdict = decide(info, sum((c / "selection.json").is_file() for c in controls))
    share, rule_share = info["manager_phase_share"], info["rule_phase_share_same_states"]
    last = list(share)[-1] if share else None
    exploits = bool(last) and share[last] - rule_share[last] >= EXPLOIT
    lines = [f"Stage 2 over the pixel workers (rmtl-fetch-fast-r6-labelled, labelled; RULE.md): {verdict}",
             "; ".join(f"pooled {c['a']} vs {c['b']}: {c['difference']:+.3f}, p = {c['p']:.3g}"
                       for c in info["comparisons_pooled"].values() if c),
             f"manager's {last} share {share.get(last, float('nan')):.3f} against the rule's "
             f"{rule_share.get(last, float('nan')):.3f} on the same states: exploits the band: {'yes' if exploits else 'no'}"
             if last else "no manager arm"]
    (HERE / "stage2_decision.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Stage 2 over the oracle worker: the arms of STRUCTURE_RULE.md on the same 200 test episodes, and its rule.

    python experiments/oracle_structure/stage2_compare.py [--episodes 200]      # from the repository root

Arms (each: the test seeds 3,000,000 + i, final curriculum stage, deterministic actions):

- ``worker_rule``: the Stage-1 worker the manager was trained over (``stage2_worker/``, 560k), with the rule;
- ``stage2_worker_rule``: the Stage-2 run's final worker (fine-tuned after the freeze) with the rule;
- ``worker_manager``: the Stage-2 run's final worker with its learned manager (greedy, every H steps);
- ``worker_manager_bc``: the same worker with the BC-only manager (before REINFORCE);
- ``rule_continued``: the same 560k worker trained 200k more steps with the rule (its final checkpoint);
- ``ppo_no_phase_input``: ``oracle_no_phase_input`` seed 0's best-on-validation policy (if finished).

The manager helps if ``worker_manager`` beats both ``worker_rule`` and ``rule_continued`` by >= 0.05,
each with an exact two-sided sign test on the discordant episodes (p < 0.05); it hurts if it is below
``worker_rule`` by >= 0.05 with p < 0.05. Reported without a rule: the manager's agreement with the rule
(paper: rmtl.train.report.stage2.PAPER_AGREEMENT) and its share of each phase against the rule's share on the same states.
Writes stage2.json / stage2.csv / stage2.md / stage2.png to results/oracle_structure/.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from rmtl.tasks.fetch_lift.env import EnvConfig
from rmtl.train.eval.evaluate import checkpoint_task, load_checkpoint
from rmtl.train.stage2.manager_callback import load_manager
from rmtl.train.report.stage2 import PAPER_AGREEMENT, PAPER_FIG7
from rmtl.train.run.run_dir import latest_checkpoint
from rmtl.train.eval.selection import TEST_SEED
from rmtl.train.stage2.compare import arm_record, sign_test
from rmtl.train.stage2.selector_eval import evaluate_selector

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "results" / "oracle_structure"
"""Where the runs this compares are kept and where its tables go."""
ARM_LABELS = {"ppo_no_phase_input": "PPO without phase input", "worker_rule": "worker (560k) + rule",
              "stage2_worker_rule": "Stage-2 worker + rule", "worker_manager": "Stage-2 worker + manager",
              "worker_manager_bc": "Stage-2 worker + BC-only manager", "rule_continued": "rule-continued (760k) + rule"}
PAPER = {k: v for k, v in PAPER_FIG7.items() if k in ARM_LABELS}
"""The paper's Fig. 7 success of the arms it has."""
MARGIN, ALPHA, EXPLOIT = 0.05, 0.05, 0.10


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--stage2", type=Path, default=HERE / "stage2" / "manager_s0")
    ap.add_argument("--worker", type=Path, default=HERE / "stage2_worker")
    ap.add_argument("--rule-continued", type=Path, default=HERE / "runs" / "oracle_rmtl_s0_rule_continued")
    ap.add_argument("--no-phase", type=Path, default=HERE / "runs" / "oracle_no_phase_input_s0")
    args = ap.parse_args(argv)
    kw = dict(episodes=args.episodes, seed=TEST_SEED, deterministic=True)
    arms: dict[str, dict] = {}

    def add(name: str, path: Path, ev) -> None:
        arms[name] = arm_record(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path, ev)
        print(f"{name}: {ev.result}", flush=True)

    # The runs' final checkpoints: local checkpoints/ where the run was made, else the committed
    # final/ (weights, normaliser and manager without optimiser state) on a fresh clone.
    s2 = latest_checkpoint(args.stage2) or args.stage2 / "final"
    model, meta, norm = load_checkpoint(s2)
    env_cfg = EnvConfig.make(**meta["config"]["env"])
    w, _, wn = load_checkpoint(args.worker)
    add("worker_rule", args.worker, evaluate_selector(w, env_cfg, selector="rule", normalizer=wn, **kw))
    add("stage2_worker_rule", s2, evaluate_selector(model, env_cfg, selector="rule", normalizer=norm, **kw))
    manager, horizon = load_manager(s2)
    add("worker_manager", s2, evaluate_selector(model, env_cfg, selector="manager", manager=manager,
                                                horizon=horizon, normalizer=norm, **kw))
    if (args.stage2 / "manager_bc.pt").is_file():
        bc, _ = load_manager(args.stage2 / "manager_bc.pt")
        add("worker_manager_bc", args.stage2 / "manager_bc.pt",
            evaluate_selector(model, env_cfg, selector="manager", manager=bc, horizon=horizon, normalizer=norm, **kw))
    rc = latest_checkpoint(args.rule_continued) if args.rule_continued.is_dir() else None
    rc = rc or (args.rule_continued / "final" if (args.rule_continued / "final").is_dir() else None)
    rc_name = "rule_continued"
    if rc is not None:
        m, _, n = load_checkpoint(rc)
        add(rc_name, rc, evaluate_selector(m, env_cfg, selector="rule", normalizer=n, **kw))
    if (args.no_phase / "selection.json").is_file():
        m, mt, n = load_checkpoint(args.no_phase / "best")
        add("ppo_no_phase_input", args.no_phase / "best",
            evaluate_selector(m, EnvConfig.make(**mt["config"]["env"]), selector="none", normalizer=n, **kw))

    def compare(a: str, b: str) -> dict | None:
        if a not in arms or b not in arms:
            return None
        d = arms[a]["success_rate"] - arms[b]["success_rate"]
        return {"a": a, "b": b, "difference": d, **sign_test(arms[a]["episode_success"], arms[b]["episode_success"])}

    vs_rule = compare("worker_manager", "worker_rule")
    vs_cont = compare("worker_manager", "rule_continued")
    if vs_rule and vs_cont and all(c["difference"] >= MARGIN and c["p"] < ALPHA for c in (vs_rule, vs_cont)):
        verdict = "the manager helps"
    elif vs_rule and vs_rule["difference"] <= -MARGIN and vs_rule["p"] < ALPHA:
        verdict = "the manager hurts"
    elif vs_cont is None:
        verdict = "open: the rule-continued control is missing"
    else:
        verdict = "no difference shown"
    man = arms["worker_manager"]
    names = list(checkpoint_task(meta).micro_tasks.names)
    tot = max(1, sum(man["phase_steps"]))
    share = {n: man["phase_steps"][i] / tot for i, n in enumerate(names)}
    rule_share = {n: man["rule_phase_steps"][i] / tot for i, n in enumerate(names)}
    last = names[-1]
    exploits = share[last] - rule_share[last] >= EXPLOIT
    out = {"episodes": args.episodes, "test_seed": TEST_SEED, "arms": arms,
           "comparisons": {"manager_vs_rule": vs_rule, "manager_vs_rule_continued": vs_cont,
                           "manager_vs_stage2_worker_rule": compare("worker_manager", "stage2_worker_rule")},
           "verdict": verdict, "manager_phase_share": share, "rule_phase_share_same_states": rule_share,
           "manager_exploits_last_phase": bool(exploits), "paper": PAPER, "paper_agreement": PAPER_AGREEMENT}
    (HERE / "stage2.json").write_text(json.dumps(out, indent=1))
    labels = ARM_LABELS
    with (HERE / "stage2.csv").open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["arm", "successes", "episodes", "success_rate", "ci_low", "ci_high", "step_agreement_rule",
                     "decision_agreement_rule", "paper"])
        for k, a in arms.items():
            wr.writerow([k, a["successes"], a["episodes"], round(a["success_rate"], 4), round(a["ci"][0], 4),
                         round(a["ci"][1], 4), round(a["step_agreement_rule"], 4), round(a["decision_agreement_rule"], 4)
                         if a["decision_agreement_rule"] == a["decision_agreement_rule"] else "", PAPER.get(k, "")])
    lines = [f"# Stage 2 over `oracle_rmtl_s0` at 560k ({args.episodes} test episodes, seeds {TEST_SEED}+i)", "",
             "| arm | success (95% CI) | agreement with the rule (steps / decisions) | paper |", "|---|---|---|---|"]
    for k, a in arms.items():
        ag = "" if k in ("ppo_no_phase_input",) or a["step_agreement_rule"] != a["step_agreement_rule"] else (
            f"{a['step_agreement_rule']:.3f}" + (f" / {a['decision_agreement_rule']:.3f}"
                                                 if a["decision_agreement_rule"] == a["decision_agreement_rule"] else ""))
        lines.append(f"| {labels.get(k, k)} | {a['success_rate']:.3f} ({a['ci'][0]:.3f}-{a['ci'][1]:.3f}) "
                     f"| {ag} | {PAPER.get(k, '')} |")
    lines += ["", "Paired sign tests (episodes where only one arm succeeded):", ""]
    for c in out["comparisons"].values():
        if c:
            lines.append(f"- {c['a']} vs {c['b']}: difference {c['difference']:+.3f}, only A {c['a_only']}, "
                         f"only B {c['b_only']}, p = {c['p']:.3g}")
    lines += ["", f"**Verdict (STRUCTURE_RULE.md):** {verdict}.", "",
              "Manager's share of steps per phase (the rule's share on the same states): "
              + ", ".join(f"{n} {share[n]:.3f} ({rule_share[n]:.3f})" for n in names)
              + f". Exploits the band's higher pay for the last phase (share >= rule's + {EXPLOIT}): "
              + ("yes" if exploits else "no") + ".", ""]
    (HERE / "stage2.md").write_text("\n".join(lines))
    _plot(arms, labels, HERE / "stage2.png")
    print("\n".join(lines))
    return 0


def _plot(arms: dict, labels: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 3.6))
    ax = fig.add_subplot()
    keys = list(arms)
    ys = [arms[k]["success_rate"] for k in keys]
    err = [[y - arms[k]["ci"][0] for k, y in zip(keys, ys)], [arms[k]["ci"][1] - y for k, y in zip(keys, ys)]]
    ax.bar(range(len(keys)), ys, yerr=err, capsize=4, color="tab:blue", label="ours (oracle scorer)")
    px = [i for i, k in enumerate(keys) if k in PAPER]
    ax.scatter(px, [PAPER[keys[i]] for i in px], color="tab:red", marker="D", zorder=3, label="paper (Fig. 7)")
    ax.set_xticks(range(len(keys)), [labels.get(k, k) for k in keys], rotation=20, ha="right", fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("test success (95% CI)")
    ax.set_title("Stage 2 over the oracle worker (560k): same 200 test episodes")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())

"""The behavioural comparison of paper Fig. 7 for one Stage-2 run: the worker with the rule, with the
learned manager and with the BC-only one, beside the Stage-1 baselines, on the same seeded random starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rmtl.provenance import portable_path, recorded_path
from rmtl.train.run.csv_log import read_csv, write_csv

PAPER_FIG7 = {"ppo_no_phase_input": 0.89, "worker_rule": 0.94, "worker_manager": 0.98, "single_prompt": 0.0}
"""Random-start success rates of the paper's Fig. 7 (and the manager's agreement with the rule: 0.73)."""
PAPER_AGREEMENT = 0.73


def _num(x: float) -> float | str:
    return round(float(x), 4) if x == x else ""


def _fmt(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "-"


def stage2_report(run_dir: str | Path, out_dir: str | Path, *, no_phase: str | Path | None = None,
                  single_prompt: str | Path | None = None, episodes: int = 100, seed: int = 1_000_000,
                  traces: int = 4, deterministic: bool = True) -> dict[str, Path]:
    """The behavioural comparison of paper Fig. 7 for one Stage-2 run, on the same seeded random starts.

    Rows (each: success rate, 95% Wilson CI, mean length, agreement with the rule):
    (a) ``ppo_no_phase_input``: the ``no_phase`` Stage-1 checkpoint/run (skipped if None);
    (b) ``worker_rule``: the Stage-2 run's final worker with the distance rule;
    (b0) ``stage1_worker_rule``: the Stage-1 worker checkpoint the run started from, with the rule;
    (c) ``worker_manager``: the final worker with the learned manager (greedy, every H steps);
    (c0) ``worker_manager_bc``: the final worker with the BC-only manager (``manager_bc.pt``, if present);
    (d) ``single_prompt``: the ``single_prompt`` Stage-1 checkpoint/run with the rule (skipped if None).

    Writes ``behaviour.csv/.md/.json`` (with the paper's numbers beside ours, BC accuracy and
    training agreement from the run) and ``phase_traces.png`` (the phase the manager and the
    rule pick along the first ``traces`` manager-driven episodes).
    """
    from matplotlib.figure import Figure

    from rmtl.train.config import EnvConfig
    from rmtl.train.eval.evaluate import checkpoint_task, load_checkpoint, resolve_checkpoint
    from rmtl.train.stage2.manager_callback import load_manager
    from rmtl.train.stage2.selector_eval import evaluate_selector

    d = Path(run_dir)
    ck = resolve_checkpoint(d)
    meta = json.loads((ck / "meta.json").read_text())
    env_cfg = EnvConfig.make(**meta["config"]["env"])
    phase_names = checkpoint_task(meta).micro_tasks.names
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manager, horizon = load_manager(ck)
    model, _, norm = load_checkpoint(ck)
    rows: list[dict[str, Any]] = []
    trace_eval = None

    def add(name: str, label: str, source: str, ev: Any) -> None:
        r = ev.result
        rows.append({"policy": name, "label": label, "success_rate": round(r.success_rate, 4),
                     "ci_low": round(r.ci_low, 4), "ci_high": round(r.ci_high, 4), "successes": r.successes,
                     "episodes": r.episodes, "mean_length": round(r.mean_length, 2),
                     "step_agreement_rule": _num(ev.step_agreement), "decision_agreement_rule": _num(ev.decision_agreement),
                     "paper_success": PAPER_FIG7.get(name, ""), "checkpoint": portable_path(source)})

    kw = dict(episodes=episodes, seed=seed, deterministic=deterministic)
    if no_phase is not None:
        m, mt, n = load_checkpoint(no_phase)
        add("ppo_no_phase_input", "(a) PPO without phase input", str(resolve_checkpoint(no_phase)),
            evaluate_selector(m, EnvConfig.make(**mt["config"]["env"]), selector="none", normalizer=n, **kw))
    add("worker_rule", "(b) worker + rule", str(ck), evaluate_selector(model, env_cfg, selector="rule", normalizer=norm, **kw))
    if meta.get("worker"):
        m, _, n = load_checkpoint(recorded_path(meta["worker"]))
        add("stage1_worker_rule", "(b0) Stage-1 worker + rule", str(meta["worker"]),
            evaluate_selector(m, env_cfg, selector="rule", normalizer=n, **kw))
    trace_eval = evaluate_selector(model, env_cfg, selector="manager", manager=manager, horizon=horizon,
                                   normalizer=norm, traces=traces, **kw)
    add("worker_manager", "(c) worker + learned manager", str(ck), trace_eval)
    if (d / "manager_bc.pt").is_file():
        bc_net, _ = load_manager(d / "manager_bc.pt")
        add("worker_manager_bc", "(c0) worker + BC-only manager", str(d / "manager_bc.pt"),
            evaluate_selector(model, env_cfg, selector="manager", manager=bc_net, horizon=horizon, normalizer=norm, **kw))
    if single_prompt is not None:
        m, mt, n = load_checkpoint(single_prompt)
        add("single_prompt", "(d) single-prompt PPO", str(resolve_checkpoint(single_prompt)),
            evaluate_selector(m, EnvConfig.make(**mt["config"]["env"]), selector="rule", normalizer=n, **kw))

    bc = json.loads((d / "bc.json").read_text()) if (d / "bc.json").is_file() else {}
    mrows = read_csv(d / "manager.csv")
    info = {
        "run": portable_path(d), "checkpoint": portable_path(ck), "stage2_env_steps": meta.get("num_timesteps"),
        "wall_seconds": meta.get("wall_seconds"), "episodes": episodes, "seed": seed,
        "bc_heldout_accuracy": bc.get("heldout_accuracy"), "bc_heldout_samples": bc.get("heldout_samples"),
        "train_agreement_rule_last": mrows[-1].get("agreement_rule") if mrows else None,
        "train_step_agreement_rule_last": mrows[-1].get("step_agreement_rule") if mrows else None,
        "eval_step_agreement_rule": trace_eval.step_agreement, "eval_decision_agreement_rule": trace_eval.decision_agreement,
        "paper_agreement": PAPER_AGREEMENT, "rows": rows,
    }
    paths: dict[str, Path] = {"behaviour_csv": write_csv(out / "behaviour.csv", rows)}
    paths["behaviour_json"] = out / "behaviour.json"
    paths["behaviour_json"].write_text(json.dumps(info, indent=1, default=str))
    md = [f"Random-start success ({episodes} seeded episodes from {seed}, final stage U[0.75, 1]); "
          f"Stage-2 run {d.name} at {meta.get('num_timesteps')} env steps.", "",
          "| policy | success | 95% CI | paper | agreement with rule (steps / decisions) |", "|---|---|---|---|---|"]
    for r in rows:
        paper = f"{r['paper_success']:.2f}" if isinstance(r["paper_success"], float) else ""
        md.append(f"| {r['label']} | {r['success_rate']:.3f} | {r['ci_low']:.3f}-{r['ci_high']:.3f} | {paper} | "
                  f"{_fmt(r['step_agreement_rule'])} / {_fmt(r['decision_agreement_rule'])} |")
    acc = bc.get("heldout_accuracy")
    md += ["", f"BC held-out accuracy: {acc:.3f} ({bc.get('heldout_samples')} samples)" if acc is not None else
           "BC held-out accuracy: n/a",
           f"Manager-rule agreement (eval decisions): {trace_eval.decision_agreement:.3f} (paper: ~{PAPER_AGREEMENT:.2f})"]
    paths["behaviour_md"] = out / "behaviour.md"
    paths["behaviour_md"].write_text("\n".join(md) + "\n")

    tr = trace_eval.traces
    fig = Figure(figsize=(9, 1.8 * max(len(tr), 1) + 0.6))
    for j, t in enumerate(tr):
        ax = fig.add_subplot(max(len(tr), 1), 1, j + 1)
        x = np.arange(len(t["phase"]))
        ax.step(x, t["rule"], where="post", color="0.5", lw=2.5, alpha=0.6, label="rule")
        ax.step(x, t["phase"], where="post", color="C3", lw=1.4, label="learned manager")
        ax2 = ax.twinx()
        ax2.plot(x, t["distance"], color="C0", lw=0.8, alpha=0.6)
        ax2.set_ylabel("gripper-cube m", fontsize=7, color="C0")
        ax.set_yticks(range(len(phase_names)), phase_names, fontsize=7)
        ax.set_ylim(-0.3, len(phase_names) - 0.7)
        ax.set_title(f"episode {j} ({'success' if t['success'][0] else 'failure'})", fontsize=8)
        if j == 0:
            ax.legend(fontsize=7, loc="upper left")
    if tr:
        fig.axes[0].figure.supxlabel("env step")
    fig.tight_layout()
    paths["phase_traces_png"] = out / "phase_traces.png"
    fig.savefig(paths["phase_traces_png"], dpi=110)
    return paths

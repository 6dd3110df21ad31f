"""Fits the learnability map (results/learnability/RULE.md) from the finished degraded-oracle runs.

    python experiments/learnability/fit_map.py [--runs results/learnability/runs] [--out results/learnability]

For each condition of conditions.yaml: the scorer's metrics on the qualification set (``rmtl
qualify``'s, one error landscape per training seed, averaged) and each finished seed's test
success (best on validation, 200 episodes). Rule-only's three committed 600k runs are placed at
chance metrics (a constant score: no rank, grasp AUC 0.5, a resting cube paid like a lifted one).
The ``checks`` of conditions.yaml (the replayed stand-ins) are measured the same way and kept out
of the fit: map.json and runs.md give each its outcomes beside the verdict the map gives its metrics.
Writes the map (``map.json`` content) to the task's package (``Task.learnability_map``, read by
``rmtl qualify`` and shipped in the wheel; ``--map-out`` elsewhere), and runs.csv, runs.md (one row per run), conditions.md (one
row per condition: its mean metrics, each seed's outcome, how many taught) and the map's PNGs.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import yaml

from pipeline.qualify import (METRICS, NO_SCORER_METRICS, load_families, map_support, map_verdict, plot_map, scorer_metrics,
                              state_scorer, state_set, windowed_scores)
from rmtl.config import nest_dotted
from rmtl.provenance import data_dir
from rmtl.tasks import get_task

from run_queue import condition_overrides  # this script's folder

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TEACHES = 0.5
"""Test success from which a run teaches (RULE.md)."""


def nested(flat: dict) -> dict:
    """{"reward.error.default.noise": 0.3} -> the reward section {"error": {"default": {"noise": 0.3}}}."""
    return nest_dotted(flat).get("reward", {})


def outcome(run_dir: Path) -> dict | None:
    sel = run_dir / "selection.json"
    if not sel.is_file() or (run_dir / "resume").exists():
        return None
    d = json.loads(sel.read_text())
    return {"best": d["best"]["test"]["success_rate"], "final": d["final"]["test"]["success_rate"],
            "best_step": d["best"]["num_timesteps"]}


def fit(points: list[tuple[dict, float]], axes: list[str], seed: int = 0) -> dict:
    from sklearn.linear_model import LogisticRegression

    x = np.array([[m[a] for a in axes] for m, _ in points], dtype=float)
    y = np.array([o >= TEACHES for _, o in points], dtype=int)
    mean, scale = np.nanmean(x, axis=0), np.nanstd(x, axis=0)
    scale[scale == 0] = 1.0
    z = np.nan_to_num((x - mean) / scale)
    model = LogisticRegression(C=1.0).fit(z, y)
    rng = np.random.default_rng(seed)
    coefs, icpts = [], []
    for _ in range(1000):
        idx = rng.integers(0, len(y), len(y))
        if len(set(y[idx])) < 2:
            continue
        m = LogisticRegression(C=1.0).fit(z[idx], y[idx])
        coefs.append(m.coef_[0].tolist())
        icpts.append(float(m.intercept_[0]))
    return {"mean": mean.tolist(), "scale": scale.tolist(), "coef": model.coef_[0].tolist(),
            "intercept": float(model.intercept_[0]), "bootstrap_coef": coefs, "bootstrap_intercept": icpts}


def condition_table(conditions: list[dict], seeds: list[int], by_seed: dict[tuple[str, int], float]) -> str:
    """conditions.md: a condition per row, its mean metrics, each seed's test success and how many taught."""
    head = ["condition", *METRICS, *[f"seed {s}" for s in seeds], "taught"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for c in conditions:
        outs = [by_seed.get((c["name"], s)) for s in seeds]
        done = [o for o in outs if o is not None]
        lines.append(f"| {c['name']} | " + " | ".join(f"{c['metrics'][k]:.2f}" for k in METRICS) + " | "
                     + " | ".join("-" if o is None else f"{o:.3f}" for o in outs)
                     + f" | {sum(o >= TEACHES for o in done)} of {len(done)} |")
    return "\n".join(lines) + "\n"


def plot_metrics(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(2, 3, figsize=(12, 7))
    for ax, metric in zip(axs.ravel(), METRICS):
        for r in rows:
            ax.scatter(r[metric], r["test_success"], c="tab:green" if r["test_success"] >= TEACHES else "tab:red", s=25)
            ax.annotate(r["condition"], (r[metric], r["test_success"]), fontsize=5, alpha=0.6)
        ax.axhline(TEACHES, color="grey", lw=0.8, ls="--")
        ax.set_xlabel(metric)
        ax.set_ylabel("test success (best on validation)")
    fig.suptitle("learnability map: test success at 300k against each scorer metric (one point per run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=HERE / "conditions.yaml")
    ap.add_argument("--runs", type=Path, default=REPO / "results/learnability/runs")
    ap.add_argument("--rule-only", type=Path, default=REPO / "results/oracle_structure/runs")
    ap.add_argument("--out", type=Path, default=REPO / "results/learnability")
    ap.add_argument("--map-out", type=Path, default=None,
                    help="where map.json goes (default: the task's map, shipped with its package: Task.learnability_map)")
    ap.add_argument("--small", action="store_true", help="metrics on the CI-sized qualification set")
    a = ap.parse_args(argv)
    spec = yaml.safe_load(a.spec.read_text())
    task_name, families = load_families(small=a.small)
    task = get_task(task_name)
    states = state_set(task_name, families, data_dir() / "qualification" / ("small" if a.small else "full") / "states")
    def measured(name: str, overrides: dict | None, rows: list[dict]) -> dict:
        """A condition's metrics (averaged over its seeds' error landscapes) and finished outcomes;
        each finished run appended to ``rows``."""
        reward = {"kind": spec["variant"], **nested(condition_overrides(overrides))}
        per_seed, outcomes = [], []
        for seed in spec["seeds"]:
            kind, cfg = state_scorer(task, reward, seed)
            m = scorer_metrics(task, windowed_scores(kind.scores(states.states), states, cfg.shaping.score_window), states)
            per_seed.append(m)
            o = outcome(a.runs / f"{name}_s{seed}")
            if o is not None:
                outcomes.append(o["best"])
                rows.append({"condition": name, "seed": seed, **m, "test_success": o["best"], "final_test": o["final"],
                             "best_step": o["best_step"]})
        metrics = {k: float(np.nanmean([m[k] for m in per_seed])) for k in METRICS}
        return {"name": name, "metrics": metrics, "outcomes": outcomes, "seeds_done": len(outcomes)}

    rows, conditions, check_rows = [], [], []
    conditions = [measured(name, overrides, rows) for name, overrides in spec["conditions"].items()]
    checks = [measured(name, overrides, check_rows) for name, overrides in (spec.get("checks") or {}).items()]
    ro = [outcome(a.rule_only / f"rule_only_s{s}") for s in (0, 1, 2)]
    ro_out = [o["best"] for o in ro if o is not None]
    conditions.append({"name": "rule_only_600k", "metrics": NO_SCORER_METRICS, "outcomes": ro_out, "seeds_done": len(ro_out)})
    rows += [{"condition": "rule_only_600k", "seed": s, **NO_SCORER_METRICS, "test_success": o["best"],
              "final_test": o["final"], "best_step": o["best_step"]} for s, o in enumerate(ro) if o is not None]
    complete = [c for c in conditions if c["seeds_done"] >= len(spec["seeds"]) and c["name"] != "rule_only_600k"]
    points = [({k: r[k] for k in METRICS}, r["test_success"]) for r in rows]
    classes = {o >= TEACHES for _, o in points}
    result: dict = {"axes": list(METRICS), "teaches_at": TEACHES, "conditions": conditions,
                    "runs": len(rows), "complete_conditions": len(complete)}
    if len(complete) >= 3 and len(classes) == 2:
        result.update(fitted=True, **fit(points, list(METRICS)), support=map_support(
            # rule-only's runs (600k, no scorer) sit at the chance corner: they are fitted, not support
            [({k: r[k] for k in METRICS}, r["test_success"]) for r in rows if r["condition"] != "rule_only_600k"], TEACHES))
    else:
        result.update(fitted=False, why=f"{len(complete)} of {len(spec['conditions'])} conditions have all seeds "
                                        f"(3 needed) and the runs {'show both outcomes' if len(classes) == 2 else 'show one outcome only'}")
        if len(classes) == 2 and len(points) >= 6:  # a provisional fit, labelled as such, for the plots only
            result["provisional"] = fit(points, list(METRICS))
    for c in checks:
        c["verdict"] = map_verdict(c["metrics"], result)
    result["checks"] = checks
    a.out.mkdir(parents=True, exist_ok=True)
    map_out = a.map_out or get_task().learnability_map
    map_out.write_text(json.dumps(result, indent=1))
    with open(a.out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["condition", "seed", *METRICS, "test_success", "final_test", "best_step"])
        w.writeheader()
        w.writerows(rows)
    lines = ["| condition | seed | " + " | ".join(METRICS) + " | test success (best) | final |", "|---" * (len(METRICS) + 4) + "|"]
    lines += [f"| {r['condition']} | {r['seed']} | " + " | ".join(f"{r[k]:.2f}" for k in METRICS)
              + f" | {r['test_success']:.3f} | {r['final_test']:.3f} |" for r in rows]
    if checks:
        lines += ["", "Checks of the map (kept out of the fit; verdict: the map's at the check's metrics):", "",
                  "| check | seed | " + " | ".join(METRICS) + " | test success (best) | final |",
                  "|---" * (len(METRICS) + 4) + "|"]
        lines += [f"| {r['condition']} | {r['seed']} | " + " | ".join(f"{r[k]:.2f}" for k in METRICS)
                  + f" | {r['test_success']:.3f} | {r['final_test']:.3f} |" for r in check_rows]
        lines += [""] + [f"- {c['name']}: verdict {c['verdict']['verdict']}, outcomes {c['outcomes'] or 'none yet'}"
                         for c in checks]
    (a.out / "runs.md").write_text("\n".join(lines) + "\n")
    by_seed = {(r["condition"], r["seed"]): r["test_success"] for r in rows + check_rows}
    seeds = list(spec["seeds"])
    (a.out / "conditions.md").write_text(
        condition_table(conditions, seeds, by_seed)
        + "\nChecks (replayed stand-ins, kept out of the fit):\n\n" + condition_table(checks, seeds, by_seed))
    plot_metrics(rows, a.out / "map_metrics.png")
    plot_map(result, {}, a.out / "map_2d.png")
    print(f"{len(rows)} runs, {len(complete)} complete conditions; fitted: {result['fitted']}"
          + (f" ({result.get('why')})" if not result["fitted"] else ""))
    if result["fitted"]:
        print("coefficients (standardised): " + ", ".join(f"{k} {c:+.2f}" for k, c in zip(METRICS, result["coef"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Leave-one-model-out validation of the learnability map: is P(teaches) right on pixel runs whose
model the map never saw?

Every pixel-level run (a Stage-1 VLM or hybrid run from scratch with the micro-task prompts, and each
seed of a replayed stand-in) is predicted by a map fitted on the degraded-oracle conditions, the
rule-only reference runs and the pixel-level runs of **every other model**: the run's own model's
runs (its hybrids and its replay included) are held out. The fit is the map's (logistic regression
of "teaches" on the standardised axes, L2 penalty C = 1, results/learnability/RULE.md); the
prediction is its point P. Writes the Brier score, a reliability plot and a table per model.

    python experiments/learnability/lomo.py [--runs results] [--out results/learnability]

Writes ``calibration_lomo.md``, ``calibration_lomo.png`` and the figures into ``calibration.json``
(``lomo_brier``, ``lomo_runs``; other keys of that file are kept). ``--map`` folds another fitted map
(e.g. a refit with the early-progress axes, whose phased feature lets it predict the single-prompt
arms too); ``--stem`` names its table and plot, and its figures go under that key.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml
from threadpoolctl import threadpool_limits

from pipeline.qualify import load_map
from pipeline.qualify.families import file_slug
from pipeline.qualify.fit import logistic_fit
from pipeline.qualify.learnability_map import fit_probability, interval_verdict, map_inputs, reward_verdict
from pipeline.qualify.trap import trap_hold
from calibration import finish_reliability  # this script's folder
from qualify_table import is_one_score, pixel_runs

REPO = Path(__file__).resolve().parents[2]
REPLAYS = {"replay_tiny": "rmtl-fetch-tiny", "replay_r5": "rmtl-fetch-fast-r5"}
"""The map's checks (replayed stand-ins) and the model each replays: held out with it."""


def training_points(fitted) -> list[tuple[dict, float]]:
    """The map's own points: each condition's metrics with each finished seed's outcome, and the
    reference runs at the chance corner, as the map was fitted (``fitted.conditions``)."""
    return [(dict(c.metrics), float(o)) for c in fitted.conditions for o in c.outcomes]


def run_steps(name: str) -> int:
    """The requested steps of the run named ``name`` (its folder in backticks)."""
    folder = REPO / name.split("`")[1]
    return int((yaml.safe_load((folder / "config.yaml").read_text()) or {})["total_timesteps"])


def report_metrics(r: dict, run: str, one_score: bool) -> dict:
    """A qualify report's metrics as a map reads them (:func:`map_inputs`), at the run's own budget."""
    return map_inputs(r["pooled"]["value"], r.get("early_progress"), one_score=one_score, steps=run_steps(run))


def pixel_points(reports: Path, runs_root: Path, fitted) -> list[dict]:
    """Pixel-level runs from scratch with their scorer's metrics: model, scorer, run, metrics, outcome. A map
    with the phased feature (fitted on one-score runs too) also predicts the single-prompt arms, each from
    the report of its own configuration."""
    extended = "phased" in fitted.axes
    out = []
    for one_score in (False, True) if extended else (False,):
        for (model, hybrid), runs in sorted(pixel_runs(runs_root, single_prompt=one_score).items()):
            for name, best, _, learner in runs:
                variant = learner.split()[0] if one_score else "rmtl"
                if learner != variant or "stopped at" in name:
                    continue  # the map predicts a learner of the scored configuration from scratch, trained to its steps
                slug = file_slug(f"{model}_hybrid_{'_'.join(hybrid)}" if hybrid else
                                 f"{model}_{variant}" if one_score else model)
                report = reports / f"qualify_{slug}.json"
                if not report.is_file():
                    continue
                scorer = (f"{model} on {'+'.join(hybrid)}" if hybrid else f"{model} as {variant}" if one_score else model)
                r = json.loads(report.read_text())
                out.append({"model": model, "scorer": scorer, "run": name, "outcome": best,
                            "metrics": report_metrics(r, name, one_score), "trap": r.get("trap") or {}})
    for check in fitted.checks:
        for seed, best in enumerate(check.outcomes):
            out.append({"model": REPLAYS.get(check.name, check.name), "scorer": f"{check.name} (replayed)",
                        "run": f"seed {seed}", "metrics": dict(check.metrics), "outcome": float(best)})
    return out


def report_verdicts(reports: Path, fitted) -> list[str]:
    """Every qualify report's verdict under the whole map (no model held out), as a table's lines: what
    ``rmtl qualify --map`` would say of each scorer, runs or not (a map without the phased feature
    leaves a one-score configuration unmapped)."""
    lines = ["| scorer | verdict | P(teaches) [90%] |", "|---|---|---|"]
    for path in sorted(reports.glob("qualify_*.json")):
        r = json.loads(path.read_text())
        v = trap_hold(reward_verdict(r["pooled"]["value"], r.get("early_progress"), (), fitted, one_score=is_one_score(r)),
                      r.get("trap") or {})
        shown = v["verdict"] + (" (held by its trap share)" if v.get("held") == "trap" else "")
        if "p_teaches" not in v:
            lines.append(f"| {r['scorer']} | {shown} | - |")
            continue
        lines.append(f"| {r['scorer']} | {shown} | {v['p_teaches']:.2f} [{v['p_interval_90'][0]:.2f}, "
                     f"{v['p_interval_90'][1]:.2f}] |")
    return lines


def lomo(points: list[dict], base: list[tuple[dict, float]], axes: list[str], teaches_at: float) -> list[dict]:
    """Each model's runs predicted by the map's fit (``logistic_fit``, with its bootstrap) on ``base`` and
    every other model's runs: P(teaches), its 90% interval and the verdict they give."""
    out = []
    for model in sorted({p["model"] for p in points}):
        held = [p for p in points if p["model"] == model]
        train = [({a: m.get(a, np.nan) for a in axes}, o) for m, o in base]
        train += [({a: p["metrics"].get(a, np.nan) for a in axes}, p["outcome"]) for p in points if p["model"] != model]
        with threadpool_limits(limits=1):  # a few dozen rows: BLAS threads only contend for the cores
            fit = logistic_fit(train, axes, teaches_at)
        for p in held:
            prob, lo, hi = fit_probability(fit, axes, p["metrics"])
            verdict = trap_hold({"verdict": interval_verdict(lo, hi)}, p.get("trap") or {})
            out.append({**p, "p": prob, "interval": [lo, hi],
                        "verdict": verdict["verdict"] + (" (trap)" if verdict.get("held") else ""),
                        "taught": p["outcome"] >= teaches_at})
    return out


def verdict_line(rows: list[dict]) -> str:
    """How many decided verdicts (teaches / does not teach) the runs bore out; the trap hold changes a
    verdict, never P, so it moves this line and not the Brier score."""
    decided = [r for r in rows if not r["verdict"].startswith("uncertain")]
    right = sum(r["verdict"].startswith("teaches") == r["taught"] for r in decided)
    held = sum(r["verdict"].endswith("(trap)") for r in rows)
    return (f"Verdicts: **{right} of {len(decided)} decided verdicts right**, {len(rows) - len(decided)} uncertain; "
            f"{held} held at \"does not teach\" by their trap share (`pipeline/qualify/trap.py`; the hold keeps P, "
            "so the Brier score does not see it).")


def reliability_plot(rows: list[dict], brier: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = np.array([r["p"] for r in rows])
    y = np.array([float(r["taught"]) for r in rows])
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], ls="--", c="grey", lw=1)
    ax.scatter(p, y + np.random.default_rng(0).uniform(-0.03, 0.03, len(y)), s=18, alpha=0.6)
    finish_reliability(fig, ax, p, y, path, xlabel="P(teaches), the run's own model held out", ylabel="share taught",
                       title=f"Leave-one-model-out calibration (Brier {brier:.3f}, {len(rows)} runs)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=Path, default=REPO / "results/learnability/qualify")
    ap.add_argument("--runs", type=Path, default=REPO / "results")
    ap.add_argument("--out", type=Path, default=REPO / "results/learnability")
    ap.add_argument("--map", type=Path, default=None,
                    help="the fitted map whose conditions and axes the folds use (default: the task's shipped map)")
    ap.add_argument("--stem", default="calibration_lomo", help="the names of the table and plot written into --out")
    a = ap.parse_args(argv)
    fitted = load_map(a.map)
    axes = list(fitted.axes)
    points = pixel_points(a.reports, a.runs, fitted)
    rows = lomo(points, training_points(fitted), axes, fitted.teaches_at)
    brier = float(np.mean([(r["p"] - r["taught"]) ** 2 for r in rows])) if rows else float("nan")
    base = float(np.mean([r["taught"] for r in rows])) if rows else float("nan")
    reliability_plot(rows, brier, a.out / f"{a.stem}.png")
    per_model = defaultdict(list)
    for r in rows:
        per_model[r["model"]].append(r)
    lines = ["# Leave-one-model-out calibration of the learnability map", "",
             f"Written by `python experiments/learnability/lomo.py{'' if a.map is None else f' --map {a.map}'}`. "
             "Each pixel-level run (an `rmtl` learner from scratch with the micro-task prompts, a hybrid, a replayed "
             "stand-in's seed" + (", and each single-prompt arm's run beside the report of its own configuration"
                                  if "phased" in axes else "") + ") is predicted by the map's fit "
             "(logistic, L2 C = 1, on the map's axes: " + ", ".join(axes) + ") on the degraded-oracle conditions, the "
             "rule-only references and every **other** model's pixel-level runs.", "",
             f"**Leave-one-model-out Brier {brier:.3f} over {len(rows)} runs** (the base rate {base:.2f} as a constant "
             f"scores {np.mean([(base - r['taught']) ** 2 for r in rows]):.3f}; a constant 0.5 scores 0.250). "
             f"Reliability plot: `{a.stem}.png`.", "", verdict_line(rows), "",
             "| held-out model | runs | taught | mean P(teaches) | Brier |", "|---|---|---|---|---|"]
    for model, rs in sorted(per_model.items()):
        lines.append(f"| {model} | {len(rs)} | {sum(r['taught'] for r in rs)} | {np.mean([r['p'] for r in rs]):.2f} | "
                     f"{np.mean([(r['p'] - r['taught']) ** 2 for r in rs]):.3f} |")
    lines += ["", "| scorer | run | P(teaches), own model held out [90%] | verdict | best test success | taught |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scorer']} | {r['run']} | {r['p']:.2f} [{r['interval'][0]:.2f}, {r['interval'][1]:.2f}] | "
                     f"{r['verdict']} | {r['outcome']:.3f} | {'yes' if r['taught'] else 'no'} |")
    lines += ["", "## Every scorer under the whole map (no model held out)", "",
              "The verdict `rmtl qualify --map` gives each report's scorer from this map (the trap share's hold "
              "applied, the battery's hold on a degenerate behaviour not). Scorers without pixel runs (random weights, `rmtl-fetch-lit`) are here only.", "",
              *report_verdicts(a.reports, fitted)]
    (a.out / f"{a.stem}.md").write_text("\n".join(lines) + "\n")
    summary = a.out / "calibration.json"
    data = json.loads(summary.read_text()) if summary.is_file() else {}
    figures = {"lomo_brier": round(brier, 4), "lomo_runs": len(rows), "lomo_axes": axes,
               "lomo_per_model": {m: {"runs": len(rs), "brier": round(float(np.mean([(r["p"] - r["taught"]) ** 2
                                                                                    for r in rs])), 4)}
                                  for m, rs in sorted(per_model.items())}}
    # The shipped map's figures at the top; another map's (an interim refit) under its stem.
    data.update(figures if a.stem == "calibration_lomo" else {a.stem: {"map": str(a.map), **figures}})
    summary.write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(lines[:6]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

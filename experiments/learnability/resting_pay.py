"""How each condition pays a cube resting at the gripper: the distribution behind the map's
``resting_grasp_pay`` axis (its mean), per condition and seed, beside the run's outcome.

    python experiments/learnability/resting_pay.py [--runs results/learnability/runs] [--out results/learnability/resting_pay.md]

The conditions and checks are the sweep files that ``rmtl qualify fit-map`` reads (conditions.yaml,
checks.yaml beside this script).

Pay is normalised as the axis is (0: the grasp score's floor, its 5th percentile over every
state; 1: a lifted cube's mean), on the qualification set's resting-at-gripper rows in the grasp
band. Reported: mean (the axis), median, 10th percentile (how much *every* resting state is
paid: a structured confusion pays them all, a diffuse error only some), share paid at least 0.5,
standard deviation. ``--models M ...`` adds reward VLMs, scored on the qualification frames that
``rmtl qualify --model M`` rendered and embedded (run it first; nothing is rendered here otherwise),
on the rows qualify pools (families the model was trained on left out).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from pipeline.qualify import frames_folder, load_families, model_scores, state_scorer, state_set
from pipeline.qualify.fit import outcome, sweep_conditions
from rmtl.provenance import data_dir
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.quality import GRASP, LIFTED, gripper_cube_distance, lift_height, rule_phase
from rmtl.tasks.fetch_lift.scorer_errors import resting_at_gripper

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conditions", type=Path, nargs="+", default=[HERE / "conditions.yaml", HERE / "checks.yaml"])
    ap.add_argument("--runs", type=Path, default=REPO / "results/learnability/runs")
    ap.add_argument("--out", type=Path, default=REPO / "results/learnability/resting_pay.md")
    ap.add_argument("--models", nargs="*", default=[], help="reward VLMs to add (qualified with rmtl qualify first)")
    a = ap.parse_args(argv)
    task_name, families = load_families()
    task = get_task(task_name)
    rows = state_set(task_name, families, data_dir() / "qualification" / "full" / "states", progress=False)
    phase = rule_phase(np.asarray(gripper_cube_distance(rows.states)))
    rest = resting_at_gripper(rows.states) & (phase == GRASP)
    lifted = (phase == GRASP) & (np.asarray(lift_height(rows.states)) >= LIFTED)
    lines = [f"Resting-at-gripper rows: {int(rest.sum())}; lifted rows: {int(lifted.sum())} (full qualification set).", "",
             "| condition | seed | mean (the axis) | median | 10th pct | share >= 0.5 | std | test success (best) |",
             "|---|---|---|---|---|---|---|---|"]
    for c in (c for path in a.conditions for c in sweep_conditions(path)[0]):
        for seed, run_name in c.runs:
            kind, _ = state_scorer(task, c.reward, seed)
            scores = kind.scores(rows.states)
            o = outcome(a.runs / run_name)
            lines.append(row(c.name, str(seed), pay_of(scores, rest, lifted), "-" if o is None else format(o["best"], ".3f")))
    qualification = data_dir() / "qualification" / "full"
    for model in a.models:
        scores = model_scores(model, task_name, families, frames_folder(qualification, model, task_name, families),
                              rows, progress=False)
        held = ~np.isin(rows.family, [f.name for f in families if model in f.trained_on])  # as qualify pools
        lines.append(row(f"`{model}` (VLM)", "-", pay_of(scores, rest & held, lifted & held), "-"))
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def pay_of(scores: np.ndarray, rest: np.ndarray, lifted: np.ndarray) -> np.ndarray:
    """Resting rows' grasp score on the axis' scale: 0 at the score's 5th percentile, 1 at a lifted cube's mean."""
    floor = np.percentile(scores[:, GRASP], 5)
    return (scores[rest, GRASP] - floor) / (scores[lifted, GRASP].mean() - floor)


def row(name: str, seed: str, pay: np.ndarray, outcome_cell: str) -> str:
    return (f"| {name} | {seed} | {pay.mean():.2f} | {np.median(pay):.2f} | {np.percentile(pay, 10):.2f} "
            f"| {np.mean(pay >= 0.5):.2f} | {pay.std():.2f} | {outcome_cell} |")


if __name__ == "__main__":
    raise SystemExit(main())

"""Fits a degraded oracle to a pixel model: the error model (per micro-task systematic error,
i.i.d. noise, resting-grasp confusion) that reproduces the model's scores on the qualification
set, as ``reward.error`` overrides of the ``degraded_oracle`` variant (the "replayed" stand-in).

    python experiments/learnability/replay_fit.py --model rmtl-fetch-fast-r5 [--out FILE.yaml]

Per micro-task k, on the set's states in k's rule bin: the model's score is mapped to progress
units by a least-squares line against the oracle's progress (s = a + b p); the residual r =
(s - a) / b - p is the model's error in progress units. Its i.i.d. part is estimated from
step-to-step changes along episodes (var(dr) / 2, an upper bound: true progress moves too), its
systematic part is what remains of var(r). For grasp, the line is fitted without the resting-at-
the-gripper states; the ``grasp_resting`` confusion strength is set so that the replayed scorer's
resting-grasp pay (the map's axis) equals the model's: for a degraded oracle with no other error the
two are equal, but noise and systematic error raise the measured pay on their own.
A negative slope is an inverted scorer (``inverted_share`` 1).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml

from pipeline.qualify import (file_slug, fit_replayed_error, load_families, model_scores, scorer_metrics, state_scorer,
                              state_set)
from rmtl.provenance import data_dir
from rmtl.tasks import get_task


def matched_resting_strength(task, error: dict, rows, target_pay: float, seed: int = 0, steps: int = 10) -> float:
    """The ``grasp_resting`` strength at which the whole replayed error (noise and systematic parts
    included, which raise the measured pay on their own) pays a resting cube ``target_pay``, the
    model's measured resting pay; bisection on [0, 1] with the error landscape of ``seed``."""

    def pay(strength: float) -> float:
        kind, _ = state_scorer(task, {"kind": "degraded_oracle",
                                      "error": {**error, "confusions": {"grasp_resting": strength}}}, seed)
        return scorer_metrics(task, kind.scores(rows.states), rows)["resting_grasp_pay"]

    lo, hi = 0.0, 1.0
    if pay(lo) >= target_pay:
        return 0.0
    if pay(hi) <= target_pay:
        return 1.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pay(mid) < target_pay else (lo, mid)
    return round((lo + hi) / 2, 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args(argv)
    task_name, families = load_families(small=a.small)
    task = get_task(task_name)
    size = "small" if a.small else "full"
    rows = state_set(task_name, families, data_dir() / "qualification" / size / "states")
    slug = file_slug(a.model)
    held_out = ~np.isin(rows.family, [f.name for f in families if a.model in f.trained_on])
    scores = model_scores(a.model, task_name, families, data_dir() / "qualification" / size / "models" / slug, rows)
    progress = np.asarray(task.oracle_progress(rows.states))
    phases = np.asarray(task.phases(rows.states), dtype=np.int64)
    confusion = task.scorer_confusions["grasp_resting"]
    resting = confusion.region(rows.states)
    pay = task.scorer_metrics(scores[held_out], rows.states[held_out], rows.episode[held_out],
                              rows.step[held_out])["resting_grasp_pay"]
    fitted = fit_replayed_error(scores[held_out], progress[held_out], phases[held_out], rows.episode[held_out],
                                rows.step[held_out], resting[held_out], tuple(task.micro_tasks.names), pay,
                                confusion="grasp_resting", confused_task=confusion.micro_task)
    fitted["error"]["confusions"] = {"grasp_resting": matched_resting_strength(
        task, {"micro_tasks": fitted["error"]["micro_tasks"]}, rows, pay)}
    fitted["model_resting_pay"] = round(float(pay), 4)
    overrides = {"reward.error.micro_tasks." + f"{k}.{f}": v for k, e in fitted["error"]["micro_tasks"].items()
                 for f, v in e.items()}
    overrides.update({f"reward.error.confusions.{c}": v for c, v in fitted["error"].get("confusions", {}).items()})
    result = {"model": a.model, "rows": int(held_out.sum()), **fitted, "overrides": overrides}
    text = yaml.safe_dump(result, sort_keys=False)
    if a.out:
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

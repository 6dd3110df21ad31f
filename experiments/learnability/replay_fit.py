"""Fits a degraded oracle to a pixel model: the error model (per micro-task systematic error,
i.i.d. noise, resting-grasp confusion) that reproduces the model's scores on the qualification
set, as ``reward.error`` overrides of the ``degraded_oracle`` variant (the "replayed" stand-in).

    python experiments/learnability/replay_fit.py --model rmtl-fetch-fast-r5 [--out FILE.yaml]

Per micro-task k, on the set's states in k's rule bin: the model's score is mapped to progress
units by a least-squares line against the oracle's progress (s = a + b p); the residual r =
(s - a) / b - p is the model's error in progress units. Its i.i.d. part is estimated from
step-to-step changes along episodes (var(dr) / 2, an upper bound: true progress moves too), its
systematic part is what remains of var(r). For grasp, the line is fitted without the resting-at-
the-gripper states, and the mean mapped score there is the ``grasp_resting`` confusion strength.
A negative slope is an inverted scorer (``inverted_share`` 1).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml

from pipeline.qualify import file_slug, fit_replayed_error, load_families, model_scores, state_set
from rmtl.provenance import data_dir
from rmtl.tasks import get_task


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
    resting = task.scorer_confusions["grasp_resting"].region(rows.states)
    fitted = fit_replayed_error(scores[held_out], progress[held_out], phases[held_out], rows.episode[held_out],
                       rows.step[held_out], resting[held_out], tuple(task.micro_tasks.names))
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

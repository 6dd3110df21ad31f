"""Does a single-prompt reward pay a resting-cube pose as much as a lift? A search an optimiser would do.

    RMTL_DATA_DIR=... python experiments/learnability/trap_search.py --model rmtl-fetch-fast-r8 \
        --out results/pixel_fig5_r8/policy_pose/trap_search.md [--scenes 400]

The qualification set holds the poses its families pass through; a learner can find a pose none of them
visits (round 8's one-view learner holds the gripper 26 cm from the cube and 7 cm above it,
``policy_pose.md``). Here the task's coverage scenes (set directly, not by a policy; seeds from
720000) are rendered on the model's renderer and scored with the task's single global prompt, over six
views and over one (``wide_view``): the "free" scenes (gripper anywhere in the workspace, cube resting)
against the "held" scenes lifted more than 2 cm. Reported per configuration: the lifted scenes' median,
the resting scenes' 95th, 99th percentile and maximum, the share of resting scenes paid at least the
lifted median, the trap ratio and share ``rmtl qualify`` reports (``pipeline.qualify.trap``), and the
five best-paid resting scenes' geometry. The scenes are the qualification set's ``trap_scenes`` (seed
720000), here with ``--scenes`` of them, kept under ``<data dir>/trap_search``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from pipeline.qualify.families import Family, load_trap_scenes
from pipeline.qualify.scores import frames_folder, model_scores
from pipeline.qualify.trap import trap_axes, trap_rows
from rmtl.provenance import data_dir as default_data_dir
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.state import CUBE_POS, GRIPPER_POS

CONFIGURATIONS = {"six views": None, "one view (wide_view)": ["wide_view"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--scenes", type=int, default=400, help="coverage scenes (half of them free, a fifth held)")
    a = ap.parse_args(argv)
    if a.scenes < 1:
        ap.error(f"--scenes {a.scenes}: give a positive number of coverage scenes")
    shipped = load_trap_scenes()
    family = Family(shipped.name, shipped.group, {**shipped.rollout, "episodes": a.scenes})
    task = get_task()
    root = Path(default_data_dir()) / "trap_search"
    rows, resting, lifted = trap_rows(task, family, root / "states")
    frames = frames_folder(root, a.model, task.name, [family])
    s = rows.states.astype(np.float64)
    off = s[:, GRIPPER_POS] - s[:, CUBE_POS]
    if not resting.any() or not lifted.any():
        raise SystemExit(f"error: {a.scenes} coverage scenes hold {int(resting.sum())} resting and {int(lifted.sum())} "
                         "lifted ones; give more --scenes (400 by default)")
    lines = [f"Single prompt of `{a.model}` on {a.scenes} coverage scenes ({int(resting.sum())} free with the cube "
             f"resting, {int(lifted.sum())} held > 2 cm): `python experiments/learnability/trap_search.py --model "
             f"{a.model} --scenes {a.scenes}`.", "",
             "| configuration | lifted median | resting p95 | resting p99 | resting max | resting >= lifted median | "
             "trap ratio | trap share |", "|---|---|---|---|---|---|---|---|"]
    best: list[str] = []
    for name, views in CONFIGURATIONS.items():
        sc = model_scores(a.model, task.name, [family], frames, rows, progress=False, single_prompt=True, views=views)[:, 0]
        trap = trap_axes(sc, resting, lifted)
        med, r = trap["done_median"], sc[resting]
        lines.append(f"| {name} | {med:.3f} | {np.percentile(r, 95):.3f} | {np.percentile(r, 99):.3f} | {r.max():.3f} | "
                     f"{float((r >= med).mean()):.3f} | {trap['trap_ratio']:.3f} | {trap['trap_share']:.3f} |")
        for i in np.flatnonzero(resting)[np.argsort(-sc[resting])[:5]]:
            best.append(f"| {name} | {sc[i]:.3f} | {np.linalg.norm(off[i]):.3f} | {np.linalg.norm(off[i, :2]):.3f} | "
                        f"{off[i, 2]:.3f} |")
    lines += ["", "The five best-paid resting scenes:", "",
              "| configuration | score | distance (m) | horizontal (m) | height above cube (m) |", "|---|---|---|---|---|", *best]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

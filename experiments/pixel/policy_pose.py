"""Where a Stage-1 policy holds the gripper: its rollouts' gripper-cube geometry, without rendering.

    python experiments/pixel/policy_pose.py --out results/pixel_fig5_r8/policy_pose.md \
        RUN_DIR/checkpoints/step_000600320 [RUN_DIR/checkpoints/step_000200320 ...]

Each checkpoint's policy (its ``model.zip``; the worker acts on the state, so no frame is rendered)
is rolled out on 16 episodes of the task's full starts (curriculum stage 4, sampled actions as in
training, seeds from 7200000, the seeds of ``results/pixel_fig5/trap/``). Reported over the steps
from 30 on (where an episode has settled), as median [10th, 90th percentile]: the gripper-cube
distance, its horizontal part, the grip site's height above the cube centre, the cube's lift, and
the share of episodes that end in success. A table (Markdown) and the same numbers as JSON beside it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from pipeline.jobs.rollout import RolloutConfig, rollout_episodes
from rmtl.tasks.fetch_lift.state import CUBE_POS, GRIPPER_POS, lift_height

EPISODES, SEED, SETTLED_FROM = 16, 7_200_000, 30


def pose(checkpoint: Path) -> dict[str, object]:
    """The settled geometry of one checkpoint's rollouts (module docstring)."""
    cfg = RolloutConfig(policy=str(checkpoint / "model.zip"), episodes=EPISODES, stages=(4,), seed=SEED)
    out = rollout_episodes(cfg, list(range(EPISODES)), render=False)
    s = out["state"].astype(np.float64)
    off = s[:, GRIPPER_POS] - s[:, CUBE_POS]
    settled = out["step"] >= SETTLED_FROM
    ends = np.r_[out["episode"][1:] != out["episode"][:-1], True]

    def spread(v: np.ndarray) -> list[float]:
        return [round(float(x), 3) for x in (np.median(v), *np.percentile(v, [10, 90]))]

    parts = checkpoint.resolve().parts  # recorded from results/ on (a worktree's path is this machine's)
    name = "/".join(parts[parts.index("results"):] if "results" in parts else parts[-3:])
    return {"checkpoint": name, "episodes": EPISODES, "success": round(float(out["success"][ends].mean()), 3),
            "distance_m": spread(np.linalg.norm(off[settled], axis=1)),
            "horizontal_m": spread(np.linalg.norm(off[settled, :2], axis=1)),
            "height_above_cube_m": spread(off[settled, 2]),
            "lift_m": spread(np.asarray(lift_height(s[settled]), dtype=np.float64).reshape(-1))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", type=Path, nargs="+", help="checkpoint folders (each with model.zip)")
    ap.add_argument("--out", type=Path, required=True, help="the Markdown table; its JSON goes beside it")
    a = ap.parse_args(argv)
    missing = [c for c in a.checkpoints if not (c / "model.zip").is_file()]
    if missing:
        raise SystemExit(f"error: {missing[0]} holds no model.zip; give checkpoint folders of a Stage-1 run")
    rows = [pose(c) for c in a.checkpoints]
    fmt = lambda v: f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"  # noqa: E731
    lines = ["| checkpoint | success | distance (m) | horizontal (m) | height above cube (m) | lift (m) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['checkpoint']}` | {r['success']:.2f} | {fmt(r['distance_m'])} | {fmt(r['horizontal_m'])} | "
                     f"{fmt(r['height_above_cube_m'])} | {fmt(r['lift_m'])} |")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(lines) + "\n")
    a.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

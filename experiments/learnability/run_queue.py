"""Runs the learnability map's conditions (conditions.yaml beside this file) on one core per lane.

    python experiments/learnability/run_queue.py --out results/learnability/runs --claims DIR [--only NAME ...]

Start one per lane from the repository root of a pinned worktree, with the same ``--claims``
folder: each lane takes the next run that no lane has claimed (an exclusive file in
``--claims``), so two lanes never run the same one. Re-running resumes an unfinished run from
its ``resume/`` state (``rmtl train stage1`` does that for a kept run) and skips finished ones.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def condition_overrides(overrides: dict | None) -> dict:
    """A condition's ``--set`` overrides; ``replay: FILE`` (relative to the repository) stands for the
    ``overrides`` of a committed replay fit (replay_fit.py), so the fitted numbers are written once."""
    overrides = dict(overrides or {})
    if "replay" in overrides:
        fitted = yaml.safe_load((ROOT / overrides.pop("replay")).read_text())
        overrides = {**fitted["overrides"], **overrides}
    return overrides


def runs(spec: dict) -> list[tuple[str, int, dict]]:
    """(condition, seed, overrides) in queue order: seed-major, the map's conditions before its checks."""
    named = {**spec["conditions"], **(spec.get("checks") or {})}
    return [(name, seed, condition_overrides(overrides)) for seed in spec["seeds"] for name, overrides in named.items()]


def finished(run_dir: Path, steps: int) -> bool:
    summary = run_dir / "summary.json"
    if not summary.is_file() or (run_dir / "resume").exists() or not (run_dir / "selection.json").is_file():
        return False
    return int(json.loads(summary.read_text()).get("env_steps", 0)) >= steps


def command(spec: dict, name: str, seed: int, overrides: dict, out: Path) -> list[str]:
    sets = {"total_timesteps": spec["steps"], **spec["common"], **overrides}
    cmd = [sys.executable, "-m", "rmtl", "train", "stage1", "--variant", spec["variant"], "--seed", str(seed),
           "--output-dir", str(out / f"{name}_s{seed}")]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={json.dumps(value) if isinstance(value, bool) else value}"]
    return cmd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=HERE / "conditions.yaml")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--claims", type=Path, required=True)
    ap.add_argument("--only", nargs="*", default=None, help="run only these conditions")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    spec = yaml.safe_load(a.spec.read_text())
    a.claims.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "OMP_NUM_THREADS": "1"}
    for name, seed, overrides in runs(spec):
        if a.only is not None and name not in a.only:
            continue
        run_dir = a.out / f"{name}_s{seed}"
        if finished(run_dir, spec["steps"]):
            continue
        try:
            os.close(os.open(a.claims / f"{name}_s{seed}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        cmd = command(spec, name, seed, overrides, a.out)
        print(" ".join(cmd), flush=True)
        if not a.dry_run:
            rc = subprocess.call(cmd, env=env)
            print(f"{name}_s{seed}: exit {rc}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

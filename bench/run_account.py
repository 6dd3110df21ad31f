"""Where a real Stage-1 run's wall time went, by part, from the run's own records.

Every run logs, per rollout, the milliseconds per env step of each part (simulation,
rendering, embedding, cache lookups, policy and the rest of the rollout loop) and the PPO
update's seconds (``progress_*.csv``, rmtl.train.run.timing): simulation, rendering, embedding, cache lookups,
the periodic evaluations, checkpoints with their validation, and the rest of the rollout loop
(policy and bookkeeping). ``unaccounted`` is the run's ``wall_seconds`` (``summary.json``) less
all of them: start-up between the clock's start and the first rollout. Runs logged before
evaluations and checkpoints were timed apart have them inside ``policy_and_other``; their
evaluations are moved out from ``eval.csv``.

    python bench/run_account.py RUN_DIR [RUN_DIR ...] --out results/bench/run_account

Writes ``run_account.json`` (seconds per part per run, with the run's CPU and commit) and
``run_account.png`` (one stacked bar per run).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROLLOUT_PARTS = ("simulation", "rendering", "embedding", "cache_lookup", "evaluation", "checkpoints", "policy_and_other")


def account(run: Path) -> dict:
    """Seconds per part of one finished run (every progress file, resumed segments included)."""
    parts = dict.fromkeys((*ROLLOUT_PARTS, "ppo_update"), 0.0)
    for log in sorted(run.glob("progress_*.csv")):
        prev = None
        with log.open() as fh:
            for row in csv.DictReader(fh):
                steps = int(row["time/total_timesteps"])
                n = steps - (prev if prev is not None else _segment_start(log))
                prev = steps
                for p in ROLLOUT_PARTS:
                    v = row.get(f"time/ms_per_step_{p}")
                    if v not in (None, ""):
                        parts[p] += float(v) * n / 1000
                if row.get("time/update_s") not in (None, ""):
                    parts["ppo_update"] += float(row["time/update_s"])
    if not parts["evaluation"] and (run / "eval.csv").exists():
        # runs logged before evaluation was timed apart count it in policy_and_other: move it out
        with (run / "eval.csv").open() as fh:
            parts["evaluation"] = sum(float(r["eval_seconds"]) for r in csv.DictReader(fh))
        parts["policy_and_other"] = max(0.0, parts["policy_and_other"] - parts["evaluation"])
    summary = json.loads((run / "summary.json").read_text())
    wall = float(summary["wall_seconds"])
    parts["unaccounted"] = wall - sum(parts.values())
    meta = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    steps = int(summary["env_steps"])
    return {"run": str(run), "cpu": meta.get("cpu"), "git_commit": meta.get("git_commit"), "env_steps": steps,
            "wall_seconds": wall, "env_steps_per_s": round(steps / wall, 1),
            "seconds": {k: round(v, 3) for k, v in parts.items()},
            "share": {k: round(v / wall, 3) for k, v in parts.items()},
            "ms_per_env_step": {k: round(1000 * v / steps, 3) for k, v in parts.items()}}


def _segment_start(log: Path) -> int:
    """The step a progress file starts at (its name: progress_<steps>.csv)."""
    try:
        return int(log.stem.split("_")[-1])
    except ValueError:
        return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    missing = [r for r in args.runs if not (r / "summary.json").exists()]
    if missing:
        print(f"error: {missing[0]} is not a finished run (no summary.json); give run folders", file=sys.stderr)
        return 2
    rows = [account(r) for r in args.runs]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "run_account.json").write_text(json.dumps(rows, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(rows[0]["ms_per_env_step"])
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.6))
    left = [0.0] * len(rows)
    for k in keys:
        vals = [r["ms_per_env_step"][k] for r in rows]
        ax.barh(range(len(rows)), vals, left=left, label=k)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(range(len(rows)), [Path(r["run"]).name for r in rows])
    ax.set_xlabel("wall ms per env step (whole run)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out / "run_account.png", dpi=110)
    for r in rows:
        print(f"{Path(r['run']).name}: {r['wall_seconds']:.0f} s, {r['env_steps_per_s']} env steps/s; "
              + ", ".join(f"{k} {v:.0f} s" for k, v in r["seconds"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

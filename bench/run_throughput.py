"""Env steps/s and cache hit rate over a Stage-1 run, from its progress CSVs (CSV + PNG).

    python bench/run_throughput.py data/runs/stage1/rmtl_fast_s0 --out results/stage1_fast
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from rmtl.train.run.csv_log import progress_rows  # one row per step: a resumed run's later log wins

    def num(r: dict, k: str) -> float:
        v = r.get(k, "")
        return float(v) if isinstance(v, (int, float)) else float("nan")

    rows = [{"env_steps": int(r["time/total_timesteps"]), "rollout_env_steps_per_s": num(r, "time/env_steps_per_s"),
             "total_env_steps_per_s": num(r, "time/total_steps_per_s"), "cache_hit_rate": num(r, "cache/rollout_hit_rate"),
             "train_success_rate": num(r, "rollout/success_rate")} for r in progress_rows(args.run)]
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "throughput.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    x = [r["env_steps"] for r in rows]
    ax[0].plot(x, [r["total_env_steps_per_s"] for r in rows], lw=0.8)
    ax[0].set(xlabel="env steps", ylabel="env steps/s (with PPO updates)", title=args.run.name)
    ax[1].plot(x, [r["cache_hit_rate"] for r in rows], lw=0.8)
    ax[1].set(xlabel="env steps", ylabel="cache hit rate per rollout", ylim=(0, 1), title="cache (NaN: no cache)")
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out / "throughput.png", dpi=110)
    print(f"{len(rows)} rollouts -> {args.out / 'throughput.csv'}, {args.out / 'throughput.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

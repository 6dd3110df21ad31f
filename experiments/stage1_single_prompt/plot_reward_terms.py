"""Reward terms and behaviour of a Stage-1 VLM run over training, from its progress CSVs.

Per rollout (16 envs x 40 steps): mean shaped VLM reward, mean normalised score u, their
difference reward - (u - 1) (the mean of trend + momentum after the drop penalty and the
clip to [-1, 0]), the fraction of steps in each distance-rule bin, and training success.

    python experiments/stage1_single_prompt/plot_reward_terms.py RUN_DIR OUT.png [--csv OUT.csv]
"""

from __future__ import annotations

import argparse
import csv
import glob
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rmtl.tasks import get_task  # noqa: E402

PHASES = get_task().micro_tasks.names


def rows_of(run: Path) -> list[dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for f in sorted(glob.glob(str(run / "progress_*.csv"))):
        for r in csv.DictReader(open(f)):
            try:
                step = int(float(r["time/total_timesteps"]))
                u, reward = float(r["reward/vlm_u"]), float(r["reward/vlm_reward"])
            except (KeyError, ValueError):
                continue
            out[step] = {"env_steps": step, "u": u, "vlm_reward": reward, "delta_after_clip": reward - (u - 1),
                         **{p: float(r.get(f"phase/frac_{p}") or 0) for p in PHASES},
                         "train_success": float(r.get("rollout/success_rate") or 0)}
    return [out[k] for k in sorted(out)]


def smooth(xs: list[float], n: int = 10) -> list[float]:
    return [sum(xs[max(0, i - n + 1):i + 1]) / len(xs[max(0, i - n + 1):i + 1]) for i in range(len(xs))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--csv", type=Path, default=None)
    a = ap.parse_args()
    rows = rows_of(a.run)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    x = [r["env_steps"] / 1000 for r in rows]
    fig, ax = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    ax[0].plot(x, smooth([r["vlm_reward"] for r in rows]), label="shaped VLM reward")
    ax[0].plot(x, smooth([r["u"] - 1 for r in rows]), label="level u - 1")
    ax[0].plot(x, smooth([r["delta_after_clip"] for r in rows]), label="reward - (u - 1)")
    ax[0].axhline(0, color="grey", lw=0.5)
    ax[0].set_ylabel("per step (mean of 10 rollouts)")
    ax[0].legend(fontsize=8)
    for p in PHASES:
        ax[1].plot(x, smooth([r[p] for r in rows]), label=f"{p} bin")
    ax[1].set_ylabel("fraction of steps")
    ax[1].legend(fontsize=8)
    ax[2].plot(x, smooth([r["train_success"] for r in rows]), color="k")
    ax[2].set_ylabel("training success (last 100 ep.)")
    ax[2].set_xlabel("env steps (thousands)")
    fig.suptitle(f"{a.run.name}: reward terms and behaviour")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()

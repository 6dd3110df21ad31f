"""Which behaviour does each reward prefer when the scorer is perfect? (oracle-scored diagnostic)

Rolls out scripted behaviours in the pick-and-lift env (no rendering) and scores every step
with the oracle scorer under RMTL's Table-1 shaping and under the phase-offset variant,
and with the dense reference. Prints and writes the mean discounted return (gamma 0.95,
the +1 success bonus included) per behaviour, curriculum start and reward, and plots the
per-step reward of one expert episode.

    python experiments/oracle_diagnostic/behaviour_returns.py --episodes 100 --out results/oracle_diagnostic
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

from rmtl.reward.replay import discounted_returns
from rmtl.env.episode import run_episode
from rmtl.provenance import write_run_record
from rmtl.reward.shaping import RewardShaper, ShapingConfig
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.dense_reward import DenseRewardConfig, dense_reward
from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv
from rmtl.tasks.fetch_lift.expert import ACTION_SCALE
from rmtl.tasks.fetch_lift.oracle_progress import oracle_progress
from rmtl.tasks.fetch_lift.phases import rule_phase
from rmtl.tasks.fetch_lift.state import CUBE_REL_POS, gripper_cube_distance
from rmtl.train.config import stage1_config

TASK = get_task()
PHASES = TASK.micro_tasks.names
SHAPING_VARIANTS = {
    "Table 1": ("oracle_per_phase", {}),
    "level only": ("oracle_per_phase_level_only", {}),
    "offset": ("oracle_per_phase", {"band": True}),
    "offset, no drop penalty": ("oracle_per_phase", {"band": True, "drop_penalty": False}),
    "offset, level only": ("oracle_per_phase_level_only", {"band": True}),
}
"""The shapings of the oracle variants this diagnostic compared (oracle_rmtl, oracle_level_only,
oracle_phase_offset, oracle_phase_offset_no_drop_penalty, oracle_phase_offset_level_only), as
(variant of rmtl/train/variants.yaml, shaping overrides): when it ran, the default shaping was the
per-phase reconstruction of Table 1 (v1) (oracle_per_phase), and the offset is its band."""


def shaping_of(variant: str, overrides: dict) -> ShapingConfig:
    """The shaping a Stage-1 variant trains with, after ``overrides`` of its shaping section."""
    return stage1_config(variant, reward={"shaping": overrides} if overrides else {}).reward.shaping_config()


SHAPINGS = {label: shaping_of(v, o) for label, (v, o) in SHAPING_VARIANTS.items()}


class HoldAt:
    """Moves the open gripper straight to the point ``hover_height`` above the cube and holds
    it there, or holds still as soon as it is within ``stop_distance`` of the cube (a policy
    that never enters the next bin). Never grasps."""

    def __init__(self, stop_distance: float, hover_height: float = 0.05):
        self.stop, self.height = stop_distance, hover_height

    def __call__(self, obs):
        rel = np.asarray(obs["observation"], dtype=np.float64)[CUBE_REL_POS]  # cube - gripper
        move = rel + np.array([0.0, 0.0, self.height])
        if np.linalg.norm(rel) <= self.stop:
            move[:] = 0.0
        return np.clip(np.append(move / ACTION_SCALE, 1.0), -1, 1).astype(np.float32)


BEHAVIOURS = {
    "expert": lambda: TASK.behaviours["expert"](0.0, None),
    "noisy expert (0.3)": lambda: TASK.behaviours["expert"](0.3, 1),
    "hold above the cube (5 cm)": lambda: HoldAt(0.0, hover_height=0.05),
    "hold above the cube (10 cm)": lambda: HoldAt(0.0, hover_height=0.10),
    "hold 16 cm above the cube (approach bin)": lambda: HoldAt(0.0, hover_height=0.16),
    "stop at 16 cm on the way in": lambda: HoldAt(0.16),
}


def rollout(env, policy, seed: int, difficulty: float) -> tuple[np.ndarray, bool]:
    """The states env steps ended in, and whether the episode succeeded."""
    states: list[np.ndarray] = []
    end = run_episode(env, policy, seed=seed, options={"difficulty": difficulty},
                      on_step=lambda _action, obs, *_: states.append(obs["observation"]))
    return np.asarray(states), end.success


def discounted(rewards: np.ndarray, success: bool) -> float:
    """One episode's return under PPO's gamma, with the env's +1 on success."""
    return float(discounted_returns(rewards, [np.arange(len(rewards))], [success])[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=500_000)
    ap.add_argument("--out", type=Path, default=Path("results/oracle_diagnostic"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = FetchPickAndLiftEnv()
    rows, example = [], None
    for start, difficulty in (("easy start (stage 0, d=0)", 0.0), ("random start (final stage, d=1)", 1.0)):
        for name, make in BEHAVIOURS.items():
            returns: dict[str, list[float]] = {k: [] for k in (*SHAPINGS, "dense_reference")}
            succ, bins = [], np.zeros(len(PHASES))
            for ep in range(args.episodes):
                states, success = rollout(env, make(), args.seed + ep, difficulty)
                succ.append(success)
                phases = np.asarray(rule_phase(gripper_cube_distance(states)))
                bins += np.bincount(phases, minlength=len(PHASES))
                prog = oracle_progress(states)
                for label, shaping in SHAPINGS.items():
                    shaper = RewardShaper(1, shaping, num_phases=len(PHASES))
                    lo, hi = shaping.initial_low, shaping.initial_high
                    r = np.array([shaper(np.array([lo + (hi - lo) * prog[t, phases[t]]]), phases[t:t + 1]).reward[0]
                                  for t in range(len(states))], dtype=np.float64)
                    returns[label].append(discounted(r, success))
                    if example is None and name == "expert" and difficulty == 1.0 and label == "Table 1":
                        example = (states, phases, r)
                returns["dense_reference"].append(discounted(dense_reward(states, DenseRewardConfig()), success))
            for label, vals in returns.items():
                rows.append({"start": start, "behaviour": name, "reward": label, "episodes": args.episodes,
                             "success_rate": round(float(np.mean(succ)), 3),
                             "mean_discounted_return": round(float(np.mean(vals)), 3),
                             "sem": round(float(np.std(vals) / np.sqrt(len(vals))), 3),
                             **{f"frac_{p}": round(float(bins[i] / bins.sum()), 3) for i, p in enumerate(PHASES)}})
    with open(args.out / "behaviour_returns.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader(), w.writerows(rows)
    lines = ["| start | behaviour | success | " + " | ".join(r for r in (*SHAPINGS, "dense_reference")) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in range(len(SHAPINGS) + 1)) + " |"]
    for start in dict.fromkeys(r["start"] for r in rows):
        for name in BEHAVIOURS:
            sel = {r["reward"]: r for r in rows if r["start"] == start and r["behaviour"] == name}
            cells = [f"{sel[k]['mean_discounted_return']:.2f}" for k in (*SHAPINGS, "dense_reference")]
            lines.append(f"| {start} | {name} | {next(iter(sel.values()))['success_rate']:.2f} | " + " | ".join(cells) + " |")
    (args.out / "behaviour_returns.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if example is not None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        states, phases, r = example
        fig, ax = plt.subplots(figsize=(7, 3.2))
        t = np.arange(len(r))
        ax.plot(t, r, "k-", lw=1)
        for k, p in enumerate(PHASES):
            m = phases == k
            ax.scatter(t[m], r[m], s=18, label=p)
        ax.set_xlabel("step"), ax.set_ylabel("oracle reward, Table-1 shaping")
        ax.set_title("One expert episode (random start): the reward drops at each phase switch")
        ax.legend(), fig.tight_layout(), fig.savefig(args.out / "expert_episode_reward.png", dpi=120)
    write_run_record(args.out, vars(args) | {"out": str(args.out)}, args.seed, name="behaviour_returns_run.json")
    (args.out / "behaviour_returns.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

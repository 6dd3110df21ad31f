"""The hacking battery under the reward's structure (no VLM): the discounted return of every
scripted behaviour under the oracle-scored default shaping and the sweep's arms, the
per-phase reconstruction (v1), rule-only and the dense reference.

    python experiments/oracle_structure/behaviour_returns.py [--episodes 12] [--difficulty 0.3,0.6,0.9]

Each behaviour (rmtl/tasks/fetch_lift/behaviours.py) runs seeded episodes from the given start
difficulties, without action noise. A reward's return is sum_t gamma^t r_t (gamma 0.95, PPO's),
with the +1 success bonus on the last step of a successful episode. Oracle scores are put on
bounds held where a long run on all these states settles (pipeline.analyses.return_ranking, "adapted"),
the same bounds for every behaviour. A reward is hackable by a behaviour when that behaviour's
mean return beats the expert's. Writes behaviour_returns.csv / .md / .png.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from pipeline.analyses.behaviour_returns import family_table, plot_family_returns
from rmtl.reward.replay import discounted_returns, rule_only_rewards, shaped_rewards
from rmtl.env.episode import run_episode
from rmtl.reward.kinds.oracle import OracleKind
from rmtl.reward.shaping import ShapingConfig
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.dense_reward import DenseRewardConfig, dense_reward
from rmtl.tasks.fetch_lift.oracle_progress import oracle_progress
from rmtl.train.config import stage1_config

OUT = Path(__file__).resolve().parents[2] / "results" / "oracle_structure"
SHAPING_VARIANTS = {
    "oracle: band, level only (a)": "oracle_sweep_level_only",
    "oracle: band + trend, momentum (b)": "oracle_sweep_trend_momentum",
    "oracle: band + trend, momentum, drop (c)": "oracle_sweep_trend_momentum_drop",
    "oracle: earlier per-phase u - 1": "oracle_per_phase",
}
"""Row label -> the Stage-1 variant (rmtl/train/variants.yaml) whose shaping it pays."""


def rollouts(task, names, episodes: int, difficulties):
    """{behaviour: [(states env steps ended in, success), ...]}, episode i seeded 1000 + i."""
    env = task.make_env()
    out = {}
    try:
        for name in names:
            eps = []
            for i in range(episodes):
                states: list[np.ndarray] = []
                end = run_episode(env, task.behaviours[name](0.0, 1000 + i), seed=1000 + i,
                                  options={"difficulty": difficulties[i % len(difficulties)]},
                                  on_step=lambda _action, obs, *_: states.append(  # noqa: B023 (this episode's)
                                      np.asarray(obs["observation"], dtype=np.float64)))
                eps.append((np.stack(states), end.success))
            out[name] = eps
    finally:
        env.close()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=12)
    ap.add_argument("--difficulty", default="0.3,0.6,0.9")
    a = ap.parse_args(argv)
    task = get_task()
    names = sorted(task.behaviours)
    num_phases = len(task.micro_tasks.names)
    data = rollouts(task, names, a.episodes, [float(x) for x in a.difficulty.split(",")])

    # pooled rows, episodes in order
    states = np.concatenate([s for n in names for s, _ in data[n]])
    lengths = [len(s) for n in names for s, _ in data[n]]
    starts = np.cumsum([0] + lengths)
    episodes = [np.arange(starts[i], starts[i + 1]) for i in range(len(lengths))]
    phases = task.phases(states)
    initial = ShapingConfig()  # the oracle kind's scores, on the shaper's initial bounds
    scores = OracleKind(oracle_progress, num_phases, initial.initial_low, initial.initial_high).scores(states)
    active = scores[np.arange(len(states)), phases]
    rewards = {}
    for label, variant in SHAPING_VARIANTS.items():
        shaping = stage1_config(variant).reward.shaping_config()
        rewards[label] = shaped_rewards(active, phases, episodes, shaping, num_phases, "adapted")
    rule = rule_only_rewards(phases, episodes, num_phases)
    rewards["rule-only (band, u = 0.5)"] = rule
    rewards["dense reference"] = dense_reward(states, DenseRewardConfig()).astype(np.float64)

    success = [ok for n in names for _, ok in data[n]]
    owner = [n for n in names for _ in data[n]]
    table = family_table({label: discounted_returns(r, episodes, success) for label, r in rewards.items()}, owner)
    succ = {n: float(np.mean([ok for _, ok in data[n]])) for n in names}
    with open(OUT / "behaviour_returns.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["reward", "behaviour", "success_rate", "mean_discounted_return", "sem", "beats_expert"])
        for label in table:
            for n in names:
                m, se = table[label][n]
                w.writerow([label, n, succ[n], round(m, 4), round(se, 4), n != "expert" and m > table[label]["expert"][0]])
    lines = ["| behaviour | success | " + " | ".join(table) + " |", "|---|---|" + "---|" * len(table)]
    for n in names:
        cells = []
        for label in table:
            m, se = table[label][n]
            mark = " **>expert**" if n != "expert" and m > table[label]["expert"][0] else ""
            cells.append(f"{m:.2f} ± {se:.2f}{mark}")
        lines.append(f"| {n} | {succ[n]:.2f} | " + " | ".join(cells) + " |")
    lines += ["", f"Mean discounted return (gamma 0.95, +1 on success) ± s.e.m. over {a.episodes} episodes per "
              f"behaviour, start difficulties {a.difficulty}, no action noise. **>expert**: the reward pays that "
              "behaviour more than the expert (hackable by it)."]
    (OUT / "behaviour_returns.md").write_text("\n".join(lines) + "\n")
    plot_family_returns(table, OUT / "behaviour_returns.png",
                        "Scripted behaviours under the reward's structure (oracle scorer, rule-only, dense)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

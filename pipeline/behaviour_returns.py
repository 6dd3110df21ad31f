"""The hacking battery's arithmetic: what a reward pays each family of episodes (scripted
behaviours, experts, learners), as the mean discounted return, and its bar plot.

A return is sum_t gamma^t r_t with the +1 success bonus on the last step of a successful
episode (what PPO with gamma 0.95 sees). Rule-only rewards are the band at u = 0.5 (no
scorer). Used by ``experiments/oracle_structure/behaviour_returns.py`` (oracle scorer) and
``experiments/reward_vlm/rmtl-fetch-fast/gates.py`` (a VLM's stored scores).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

GAMMA = 0.95


def rule_only_rewards(phases: np.ndarray, episodes: Sequence[np.ndarray], num_phases: int) -> np.ndarray:
    """Rule-only reward of every row: a fresh one-env shaper per episode, u held at 0.5."""
    from rmtl.reward.shaping import RewardShaper, ShapingConfig

    out = np.zeros(len(phases))
    for idx in episodes:
        shaper = RewardShaper(1, ShapingConfig(), num_phases=num_phases)
        for i in idx:
            out[i] = shaper.shape_u(np.array([0.5]), phases[i:i + 1]).reward[0]
    return out


def discounted_returns(rewards: np.ndarray, episodes: Sequence[np.ndarray], success: Sequence[bool],
                       gamma: float = GAMMA) -> np.ndarray:
    """[E] discounted return of each episode (rows ``episodes[e]`` of ``rewards``), +1 on success."""
    out = []
    for idx, ok in zip(episodes, success):
        r = np.asarray(rewards[idx], dtype=np.float64).copy()
        if ok:
            r[-1] += 1.0
        out.append(float(np.sum(r * gamma ** np.arange(len(r)))))
    return np.array(out)


def family_table(returns: dict[str, np.ndarray], owner: Sequence[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """{reward: {family: (mean, s.e.m.)}} of per-episode returns, families in first-seen order."""
    owner = np.asarray(owner)
    families = list(dict.fromkeys(owner.tolist()))
    return {label: {f: (float(ret[owner == f].mean()), float(ret[owner == f].std() / np.sqrt((owner == f).sum())))
                    for f in families} for label, ret in returns.items()}


def plot_family_returns(table: dict[str, dict[str, tuple[float, float]]], path: Path, title: str) -> Path:
    """Grouped bars: one group per family, one bar (with s.e.m.) per reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(table)
    families = list(next(iter(table.values())))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(labels)
    x = np.arange(len(families))
    for i, label in enumerate(labels):
        ax.bar(x + i * width, [table[label][f][0] for f in families], width,
               yerr=[table[label][f][1] for f in families], label=label)
    ax.set_xticks(x + 0.4 - width / 2)
    ax.set_xticklabels(families, rotation=30, ha="right")
    ax.set_ylabel("mean discounted return")
    ax.axhline(0, color="k", lw=0.5)
    ax.legend(fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)

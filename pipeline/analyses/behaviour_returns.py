"""The hacking battery's table: what a reward pays each family of episodes (scripted
behaviours, experts, learners), as the mean discounted return, and its bar plot. The returns
themselves are :func:`rmtl.reward.replay.discounted_returns`. Used by
``experiments/oracle_structure/behaviour_returns.py`` (oracle scorer) and
``experiments/reward_vlm/rmtl-fetch-fast/gates.py`` (a VLM's stored scores).
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

import numpy as np


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

"""The paired-seed rule that decides a comparison of two arms from their per-seed test success.

``d`` is the difference of the two arms' means. The comparison is **supported** when ``d`` is at
least ``margin`` and arm A is better on at least ``wins`` of the seed pairs (seed i against seed
i), **contradicted** when ``d`` is at most ``-margin`` and arm B wins as often, and **no difference
shown** otherwise. It is **open** until both arms have every seed: a rule decided on the seeds
that happen to be done would change with the order the runs finished in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def paired_seed_verdict(a: Mapping[int, float], b: Mapping[int, float], seeds: Sequence[int] = (0, 1, 2),
                        margin: float = 0.10, wins: int = 2) -> dict:
    """The rule on seed -> test success of arms ``a`` and ``b``: a dict with ``verdict`` (supported,
    contradicted, no difference shown or open), and, once decided, ``d`` and each arm's pair wins."""
    missing = [s for s in seeds if s not in a or s not in b]
    if missing:
        return {"verdict": "open", "missing_seeds": missing}
    d = sum(a[s] for s in seeds) / len(seeds) - sum(b[s] for s in seeds) / len(seeds)
    a_wins = sum(a[s] > b[s] for s in seeds)
    b_wins = sum(b[s] > a[s] for s in seeds)
    verdict = ("supported" if d >= margin and a_wins >= wins else
               "contradicted" if d <= -margin and b_wins >= wins else "no difference shown")
    return {"verdict": verdict, "d": d, "a_wins": a_wins, "b_wins": b_wins}

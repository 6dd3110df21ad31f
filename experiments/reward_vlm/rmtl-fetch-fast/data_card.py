"""A stand-in round's training data by family, as a Markdown table: episodes and states of every
training store under ``--stores``, grouped by the families of ``families.yaml`` (store-name
prefixes), with the learner states (policies that learned) counted apart.

    python experiments/reward_vlm/rmtl-fetch-fast/data_card.py --stores $RMTL_DATA_DIR/r6/stores > table.md
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

from storage.dataset import DatasetStore

FAMILIES = [  # (store-name pattern, family as the cards name it, states of learners?)
    (r"train_expert(_\d+)?", "noisy experts, noise 0.15 / 0.3 / 0.6 / 1.0, stages 0-4", False),
    (r"train_random", "random actions", False),
    (r"train_b_.+", "scripted behaviours", False),
    (r"train_p_oracle_sweep_.+", "oracle-sweep policies, sampled", True),
    (r"train_pd_oracle_sweep_.+", "oracle-sweep policies, deterministic", True),
    (r"train_s_.+", "every structural run's best policy, sampled", True),
    (r"train_p_stage2_worker", "the oracle Stage-2 worker", True),
    (r"train_c_.+", "the round's own learner (pixel-reward run's policy)", True),
    (r"train_coverage_\d+", "coverage scenes (states set directly, one row each)", False),
]


def family_of(store: str) -> tuple[str, bool]:
    for pattern, name, learner in FAMILIES:
        if re.fullmatch(pattern, store):
            return name, learner
    return store, False


def data_table(stores: Path) -> str:
    rows: dict[str, list[int]] = {}
    learners = total_states = total_eps = 0
    for path in sorted(stores.glob("train_*.zarr")):
        with DatasetStore.open(path, "r") as store:
            eps = np.asarray(store.read(slice(0, store.num_rows), fields=["episode"])["episode"])
        name, learner = family_of(path.name.removesuffix(".zarr"))
        agg = rows.setdefault(name, [0, 0, 0])
        agg[0] += 1
        agg[1] += len(np.unique(eps))
        agg[2] += len(eps)
        learners += len(eps) if learner else 0
        total_eps, total_states = total_eps + len(np.unique(eps)), total_states + len(eps)
    lines = ["| family | stores | episodes | states |", "|---|---|---|---|"]
    order = [name for _, name, _ in FAMILIES]
    ranked = sorted(rows.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    lines += [f"| {name} | {s} | {e:,} | {n:,} |" for name, (s, e, n) in ranked]
    lines.append(f"| **total** | {sum(r[0] for r in rows.values())} | **{total_eps:,}** | "
                 f"**{total_states:,}** ({learners:,} of learners) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", type=Path, required=True)
    a = ap.parse_args(argv)
    print(data_table(a.stores))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Can any scorer pass the registered return gate? The gate of GATES.md (item 4) with the oracle
scorer in place of a VLM, on the same held-out stores, computed as gates.py computes it.

    python experiments/reward_vlm/rmtl-fetch-fast/oracle_gate.py --model MODEL --store STORES/heldout_*.zarr

The stores must hold ``MODEL``'s embeddings only because the store's reward steps are read
through them (pipeline.analyses.return_ranking.reward_steps); the scores here come from the state alone.
The scores are the oracle reward kind's (its progress on the scale of the shaper's initial
bounds), shaped like gates.py's RMTL row on bounds adapted to all the held-out states at once. Writes
oracle_gate.json / .md to results/reward_vlm/rmtl-fetch-fast/.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from pipeline.analyses.behaviour_returns import family_table
from pipeline.analyses.return_ranking import reward_steps
from rmtl.reward.replay import discounted_returns, rule_only_rewards, shaped_rewards
from pipeline.stores.store_models import resolve_model_id
from rmtl.reward.kinds.oracle import OracleKind
from rmtl.reward.shaping import ShapingConfig
from rmtl.tasks.fetch_lift.oracle_progress import oracle_progress
from storage.dataset import DatasetStore

from gates import NUM_PHASES, RESULTS, THRESHOLDS, beaten_by, family, success_auc  # this script's folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--store", nargs="+", required=True)
    a = ap.parse_args(argv)
    shaping = ShapingConfig()
    oracle = OracleKind(oracle_progress, NUM_PHASES, shaping.initial_low, shaping.initial_high)
    fams, active, phases, eps, success = [], [], [], [], []
    for path in sorted(a.store):
        with DatasetStore.open(path, "r") as st:
            steps = reward_steps(st, resolve_model_id(st, a.model))
        scores = oracle.scores(steps.state.astype(np.float64))
        base = sum(len(x) for x in active)
        active.append(scores[np.arange(len(steps.phase)), steps.phase])
        phases.append(steps.phase)
        eps += [idx + base for idx in steps.episodes]
        success.append(steps.success)
        fams += [family(path)] * len(steps.episodes)
    phase, success = np.concatenate(phases), np.concatenate(success)
    rewards = {"oracle (RMTL shaping)": shaped_rewards(np.concatenate(active), phase, eps, shaping, NUM_PHASES,
                                                       "adapted"),
               "rule-only": rule_only_rewards(phase, eps, NUM_PHASES)}
    table = family_table({lab: discounted_returns(r, eps, success) for lab, r in rewards.items()}, fams)
    out = {"stores": sorted(a.store), "battery": table}
    for lab, t in table.items():
        out[lab] = {"beaten_by": beaten_by(t), "clean_expert_beaten_by": beaten_by(t, "expert_clean"),
                    "success_auc": success_auc(rewards[lab], eps, fams, success),
                    "success_auc_threshold": THRESHOLDS["success_auc"]}
    (RESULTS / "oracle_gate.json").write_text(json.dumps(out, indent=1, default=float))
    labs = list(table)
    lines = ["# The registered return gate with the oracle scorer (held-out stores of the gates)", "",
             "| family | " + " | ".join(labs) + " |", "|---|" + "---|" * len(labs)]
    for f in next(iter(table.values())):
        lines.append(f"| {f} | " + " | ".join(f"{table[lab][f][0]:.2f} ± {table[lab][f][1]:.2f}" for lab in labs) + " |")
    lines.append("")
    for lab in labs:
        o = out[lab]
        lines.append(f"- **{lab}**: noisy expert beaten by {', '.join(o['beaten_by']) or 'none'}; noise-free expert "
                     f"beaten by {', '.join(o['clean_expert_beaten_by']) or 'none'}; success AUC {o['success_auc']:.3f}")
    (RESULTS / "oracle_gate.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

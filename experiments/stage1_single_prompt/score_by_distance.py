"""The single-prompt score and shaped reward by gripper-cube distance, from a diagnosis's steps.csv.

    python experiments/stage1_single_prompt/score_by_distance.py data/diag/sp80000/steps.csv \
        results/stage1_single_prompt/score_by_distance.csv
"""

import sys

import pandas as pd
from scipy.stats import spearmanr

steps = pd.read_csv(sys.argv[1])
steps["distance_bin_m"] = pd.cut(steps.distance_m, [0, 0.02, 0.04, 0.08, 0.15, 0.25, 1.0])
table = (steps.groupby(["source", "distance_bin_m"], observed=True)
         .agg(steps=("score", "size"), mean_score=("score", "mean"), mean_vlm_reward=("vlm_reward", "mean"),
              mean_lift_m=("lift_m", "mean"))
         .round(4).reset_index())
table.to_csv(sys.argv[2], index=False)
print(table.to_string(index=False))
for source, g in steps.groupby("source"):
    print(f"{source}: Spearman(score, -distance) {spearmanr(g.score, -g.distance_m)[0]:.3f}, "
          f"Spearman(score, lift) {spearmanr(g.score, g.lift_m)[0]:.3f}, n={len(g)}")

"""Is task progress in the stored image embeddings? A ridge probe (lambda 1) from the six
views' embeddings (concatenated) to the gripper-cube distance, fitted on 4/5 of the
episodes, ranked within each rule phase on the rest (episode id % 5 == 0).

usage: python experiments/reward_vlm/offexpert_text/probe_embeddings.py STORE [STORE ...]
(the store's one non-random model's embeddings; used on data/stores/atlas_learner40k.zarr:
approach 0.88, align 0.80)."""
import sys

import numpy as np
from scipy.stats import spearmanr

from rmtl.tasks.fetch_lift.phases import ALIGN, APPROACH, rule_phase
from rmtl.tasks.fetch_lift.state import gripper_cube_distance
from storage.dataset import DatasetStore

for path in sys.argv[1:]:
    with DatasetStore.open(path, "r") as s:
        d = s.read(fields=["state", "episode"])
        model_id = next(i for i in s.model_ids() if "random" not in i)
        n = len(d["state"])
        emb = np.asarray(s.embeddings(model_id, slice(0, n)), dtype=np.float32)
    dist = np.asarray(gripper_cube_distance(d["state"]))
    phase = rule_phase(dist)
    x = np.c_[emb.reshape(n, -1), np.ones(n)]
    test = (d["episode"] % 5) == 0
    a = x[~test]
    w = np.linalg.solve(a.T @ a + np.eye(a.shape[1]), a.T @ dist[~test])
    pred = x[test] @ w
    for k, name in ((APPROACH, "approach"), (ALIGN, "align")):
        m = phase[test] == k
        print(f"{path} {model_id} {name}: {int(m.sum())} held-out states, "
              f"probe Spearman {spearmanr(-pred[m], -dist[test][m]).statistic:.3f}")

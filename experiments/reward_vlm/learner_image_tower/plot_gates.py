"""Bar chart of gates.json (compare_models.py): per held-out source, each metric, one bar per model.
usage: plot_gates.py gates.json gates.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from rmtl.tasks.fetch_lift.quality import GATES

data = json.load(open(sys.argv[1]))
models = list(data)
sources = list(data[models[0]])
# the shipped model's acceptance gates, the ones the retrained towers were held to
metrics = [(key, f"{title} (gate {GATES[key]})", GATES[key]) for key, title in
           (("approach_spearman", "approach rank"), ("align_spearman", "align rank"),
            ("right_prompt_accuracy", "right prompt"))]
fig, axes = plt.subplots(1, len(metrics), figsize=(15, 5), sharey=True)
y = np.arange(len(sources))
h = 0.8 / len(models)
for ax, (key, title, gate) in zip(axes, metrics):
    for i, m in enumerate(models):
        ax.barh(y + i * h, [data[m][s][key] for s in sources], h, label=m)
    ax.axvline(gate, color="k", ls="--", lw=1)
    ax.set_title(title)
    ax.set_xlim(min(0, min(data[m][s][key] for m in models for s in sources)) - 0.05, 1.02)
axes[0].set_yticks(y + h * (len(models) - 1) / 2, [s.replace(" / ", "\n") for s in sources], fontsize=8)
axes[0].invert_yaxis()
axes[-1].legend(loc="lower right")
fig.suptitle("Held-out gate stores: shipped reward model vs image+text towers retrained on learner-like states")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)

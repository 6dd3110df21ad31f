"""Within-phase ranks of several reward models on the held-out gate stores, per source.
usage: compare_models.py OUT.json NAME=SPEC [NAME=SPEC ...]  (embeddings must exist: rmtl embed)"""
import json, sys
from pipeline.jobs.gate_set import grouped_quality
STORES = {"expert (gate, seeds 100000+)": "data/stores/gate_lod75.zarr",
          "noisy expert": "data/stores/gate_offexpert/noisy_expert.zarr",
          "RMTL run 80k": "data/stores/gate_offexpert/rmtl_fast_s0_step_000080000.zarr",
          "RMTL run 160k": "data/stores/gate_offexpert/rmtl_fast_s0_step_000160000.zarr"}
KEYS = ("approach_spearman", "align_spearman", "grasp_auc", "right_prompt_accuracy", "approach_count")
out = {}
for arg in sys.argv[2:]:
    name, spec = arg.split("=", 1)
    out[name] = {}
    for sname, path in STORES.items():
        for src, m in grouped_quality(path, spec).items():
            out[name][f"{sname} / {src}"] = {k: m["mean"][k] for k in KEYS}
json.dump(out, open(sys.argv[1], "w"), indent=1)
rows = sorted({r for v in out.values() for r in v})
print("| source | " + " | ".join(f"{n}: approach / align / grasp AUC / right" for n in out) + " |")
print("|---|" + "---|" * len(out))
for r in rows:
    cells = []
    for n in out:
        m = out[n].get(r)
        cells.append("-" if m is None else " / ".join(f"{m[k]:.3f}" for k in KEYS[:4]))
    print(f"| {r} ({out[next(iter(out))][r]['approach_count']} approach states) | " + " | ".join(cells) + " |")

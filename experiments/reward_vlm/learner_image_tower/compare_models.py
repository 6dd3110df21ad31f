"""Within-phase ranks of reward models on held-out gate stores, per source (multi-view mean).

usage: compare_models.py OUT.json --store NAME=PATH [...] --model NAME=SPEC [...]
Every store must hold embeddings of every model (rmtl embed --store PATH --model SPEC).
Prints a markdown table: approach rank / align rank / grasp AUC / right prompt, and the
active-prompt score's 5th-95th percentile over the source's states (where the Table-1
bounds 0.45/0.70 sit against the model's scores)."""
import argparse
import json

import numpy as np

from pipeline.jobs.gate_set import grouped_quality

KEYS = ("approach_spearman", "align_spearman", "grasp_auc", "right_prompt_accuracy")


def active_score_range(store_path: str, spec: str, alpha: float = 0.9) -> dict[str, list[float]]:
    """p5/p95 of the rule-active paper prompt's multi-view score, per source."""
    from pipeline.jobs.gate_set import episode_groups
    from pipeline.stores.store_models import resolve_model_id
    from pipeline.stores.store_rows import active, load_rows, per_view_scores
    from pipeline.stores.stored_text import text_embeddings
    from storage.dataset import DatasetStore

    with DatasetStore.open(store_path, "r") as store:
        mid = resolve_model_id(store, spec)
        rows = load_rows(store, mid)
        scores = per_view_scores(store, mid, text_embeddings(store, mid), [alpha], rows.rows)[0].mean(axis=1)
        groups = episode_groups(store)
    score = active(scores, rows.phase)
    label = np.array([groups.get(int(e), "live") for e in rows.episode])
    return {g: [round(float(np.percentile(score[label == g], q)), 3) for q in (5, 95)] for g in sorted(set(label))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--store", action="append", required=True)
    ap.add_argument("--model", action="append", required=True)
    a = ap.parse_args()
    stores = dict(s.split("=", 1) for s in a.store)
    models = dict(m.split("=", 1) for m in a.model)
    out: dict = {}
    for name, spec in models.items():
        out[name] = {}
        for sname, path in stores.items():
            ranges = active_score_range(path, spec)
            for src, m in grouped_quality(path, spec).items():
                row = {k: m["mean"][k] for k in KEYS}
                row.update(approach_count=m["mean"]["approach_count"], episodes=m["episodes"],
                           active_score_p5_p95=ranges[src])
                out[name][f"{sname} / {src}"] = row
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    rows = list(dict.fromkeys(r for v in out.values() for r in v))
    print("| source (approach states) | " + " | ".join(f"{n}: approach / align / grasp AUC / right [score p5-p95]"
                                                        for n in out) + " |")
    print("|---|" + "---|" * len(out))
    for r in rows:
        cells = []
        for n in out:
            m = out[n].get(r)
            cells.append("-" if m is None else " / ".join(f"{m[k]:.3f}" for k in KEYS)
                         + " [{:.2f}-{:.2f}]".format(*m["active_score_p5_p95"]))
        print(f"| {r} ({out[next(iter(out))][r]['approach_count']}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

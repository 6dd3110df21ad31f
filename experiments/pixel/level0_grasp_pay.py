"""What the grasp-phase reward pays at curriculum level 0 (the gripper starts at the cube), per kind of state.

Reads stores rendered at level 0 (``rmtl render-and-embed --stages 0``) of the scripted expert, a
scripted degenerate behaviour and learners' policies, all embedded by the same model(s), and prints
per store and model, over the rows in the rule's grasp phase: each reward's active score (RMTL's
micro-task grasp prompt; the single prompt, six views), split by the cube's lift (resting < 1 cm,
1-3 cm, > 3 cm), and the lift's gain over resting in units of the resting rows' spread. Writes the
table as CSV and Markdown.

    python experiments/pixel/level0_grasp_pay.py STORE... --models rmtl-fetch-fast-r7 --out DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from pipeline.analyses.return_ranking import variant_scores
from pipeline.stores.store_models import resolve_model_id
from pipeline.stores.store_rows import load_rows, open_store
from rmtl.train.run.csv_log import write_csv
from storage.errors import StoreError

VARIANTS = ("rmtl", "single_prompt_multi_view")
LIFT_BINS = (("resting <1 cm", -np.inf, 0.01), ("lifted 1-3 cm", 0.01, 0.03), ("lifted >3 cm", 0.03, np.inf))


def rows_of(store_path: str, model: str) -> list[dict]:
    out = []
    with open_store(store_path) as store:
        model_id = resolve_model_id(store, model)
        rows = load_rows(store, model_id)
        grasp = rows.phase == rows.phase_names.index("grasp")
        for variant in VARIANTS:
            scores, _, _ = variant_scores(store, model_id, rows.rows, rows.phase, variant, "diagnose")
            s, lift = scores[grasp], rows.lift[grasp]
            rest = s[lift < 0.01]
            base = {"store": Path(store_path).stem, "model": model, "variant": variant,
                    "grasp_rows": int(grasp.sum()), "share_of_rows_in_grasp": round(float(grasp.mean()), 3)}
            for name, lo, hi in LIFT_BINS:
                sel = s[(lift >= lo) & (lift < hi)]
                row = dict(base, lift=name, n=len(sel))
                if len(sel):
                    row.update(mean=round(float(sel.mean()), 4), p5=round(float(np.percentile(sel, 5)), 4),
                               p95=round(float(np.percentile(sel, 95)), 4))
                    if len(rest) > 1 and name != LIFT_BINS[0][0]:
                        row["gain_over_resting_sd"] = round(float((sel.mean() - rest.mean()) / rest.std()), 2)
                out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--models", default="rmtl-fetch-fast-r7", help="comma-separated model ids or specs")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    try:
        table = [r for m in a.models.split(",") for s in a.stores for r in rows_of(s, m)]
    except StoreError as e:  # a store not rendered or not embedded by a model: one line, exit 2
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    a.out.mkdir(parents=True, exist_ok=True)
    write_csv(a.out / "level0_grasp_pay.csv", table)
    cols = ["store", "model", "variant", "share_of_rows_in_grasp", "lift", "n", "mean", "p5", "p95",
            "gain_over_resting_sd"]
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in table]
    (a.out / "level0_grasp_pay.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()

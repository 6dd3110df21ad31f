"""Fig. 8 with pixels (results/pixel_fig5/RULE.md, last section): is the six-view mean smoother than
every single view? On the chosen model's qualification stores (rendered and embedded by
``rmtl qualify --model M``; nothing is rendered here), expert episodes and learner episodes apart.

    python experiments/pixel/fig8.py --model rmtl-fetch-fast-r7 [--out results/pixel_fig5/fig8]

Per store, ``rmtl per-view-analysis`` (``pipeline.analyses.per_view``) writes the per-view dataset (kept in the
data directory: a store is never committed) and its Fig. 3/8 PNGs (copied to ``--out``). The registered statistic, per view and for the mean: the mean step-to-step change of
the active micro-task's score (consecutive steps in one rule phase) over its within-phase spread
(p95 - p5, averaged over the phases): the map's noise ratio, so views on other score scales compare
fairly. Families a model was trained on are left out (as ``rmtl qualify`` pools).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from pipeline.stores.analysis_dataset import read_dataset
from pipeline.analyses.per_view import per_view_analysis
from pipeline.qualify import file_slug, frames_folder, load_families
from rmtl.provenance import data_dir, portable_path
from rmtl.reward.quality_stats import spread

REPO = Path(__file__).resolve().parents[2]
GROUPS = {"expert": ("expert", "noisy_expert"), "learner": ("learner",)}


MEAN = "six-view mean"


def noise_ratio_parts(ds: dict, attrs: dict) -> dict[str, tuple[float, float]]:
    """(mean step change, mean within-phase spread) of each view's and the mean's active score: the
    step change is the per-view analysis's own (its summary's ``step_variation``), the spread is
    p95 - p5 within each rule phase, averaged over the phases."""
    variation = attrs["summary"]["step_variation"]
    phase = ds["phase"]
    scores = {**{v: ds["per_view"][:, i] for i, v in enumerate(attrs["views"])}, MEAN: ds["mean"]}
    return {name: (variation["mean" if name == MEAN else name], float(np.mean([spread(x[phase == k])
                                                                          for k in np.unique(phase)])))
            for name, x in scores.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path, default=REPO / "results/pixel_fig5/fig8")
    a = ap.parse_args(argv)
    task_name, families = load_families()
    folder = frames_folder(data_dir() / "qualification" / "full", a.model, task_name, families)
    a.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    raw: dict[str, dict] = {}
    for group, kinds in GROUPS.items():
        parts: dict[str, list] = {}
        for fam in families:
            if fam.group not in kinds or a.model in fam.trained_on:
                continue
            store = folder / f"{fam.name}.zarr"
            if not store.exists():
                raise SystemExit(f"error: {store} is missing: run `rmtl qualify --model {a.model}` first")
            # The per-view dataset (a Zarr store) stays in the data directory; its PNGs come to --out.
            work = data_dir() / "fig8" / file_slug(a.model) / fam.name
            res = per_view_analysis(str(store), model_id=a.model, out_dir=work, plots=True)
            for kind, png in res.plots.items():
                shutil.copyfile(png, a.out / f"{fam.name}_{kind}.png")
            ds, attrs = read_dataset(res.dataset)
            for name, (delta, spr) in noise_ratio_parts(ds, attrs).items():
                parts.setdefault(name, []).append((delta, spr, len(ds["mean"])))
        # Pooled over the group's stores, each weighted by its rows.
        results[group] = {name: float(np.average([d / s for d, s, _ in p], weights=[n for *_, n in p]))
                          for name, p in parts.items()}
        raw[group] = {name: float(np.average([d for d, _, _ in p], weights=[n for *_, n in p])) for name, p in parts.items()}
    mean_wins = {g: all(r[MEAN] < v for k, v in r.items() if k != MEAN) for g, r in results.items()}
    view_wins = [k for k in results["expert"] if k != MEAN
                 and all(results[g][k] < results[g][MEAN] for g in results)]
    verdict = ("supported" if all(mean_wins.values()) else "contradicted" if view_wins else "mixed")
    lines = [f"# Fig. 8 with pixels: per-view smoothness of `{a.model}`", "",
             f"`python experiments/pixel/fig8.py --model {a.model}` on the qualification stores (`rmtl qualify`'s), "
             "families the model trained on left out. Noise ratio: mean step-to-step change of the active "
             "micro-task's score within a rule phase over its within-phase spread (lower: smoother).", "",
             "| view | noise ratio, expert episodes | noise ratio, learner episodes | raw step change, expert | raw, learner |",
             "|---|---|---|---|---|"]
    for name in results["expert"]:
        bold = "**" if name == MEAN else ""
        lines.append(f"| {bold}{name}{bold} | {results['expert'][name]:.3f} | {results['learner'][name]:.3f} "
                     f"| {raw['expert'][name]:.4f} | {raw['learner'][name]:.4f} |")
    lines += ["", f"**Claim 3 (the six-view mean is smoother than every single view), by RULE.md: {verdict}** "
              f"(mean below every view: expert {mean_wins['expert']}, learner {mean_wins['learner']}; views below the "
              f"mean on both: {', '.join(view_wins) or 'none'}). Per-store PNGs (Fig. 3/8 form) beside this file: "
              "`<family>_frame.png`, `<family>_episodes.png`. Not decided on: the raw step change (no spread), "
              "in which a mean of six scores is smoother by construction."]
    (a.out / "README.md").write_text("\n".join(lines) + "\n")
    (a.out / "fig8.json").write_text(json.dumps({"model": a.model, "noise_ratio": results, "raw_step_change": raw, "verdict": verdict,
                                                 "stores": portable_path(str(folder))}, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Tabulates `rmtl qualify` reports (qualify_*.json) as results/learnability/qualify_table.md, with each
model's pixel runs (committed kept runs whose reward.model is that model; for a hybrid's report, the
hybrid runs that give the model the same micro-tasks) beside its verdict.

    python experiments/learnability/qualify_table.py REPORT_DIR [--runs results] [--out ...] [--map results/learnability/map.json]

Each verdict is read again from ``--map`` (the committed map by default) and each report's JSON is
updated to it, so a map fitted after the reports were made needs no new scoring; the scorers'
points are drawn on one map (``--png``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import yaml

from pipeline.qualify import MAP_FILE, METRICS, load_map, plot_map, scorer_verdict
from rmtl.train.config import Stage1Config

REPO = Path(__file__).resolve().parents[2]


def pixel_runs(root: Path) -> dict[tuple[str, tuple[str, ...]], list[tuple[str, float, float]]]:
    """(model, micro-tasks it scores in a hybrid, () for all) -> [(run, best test success, final test
    success)] of the kept VLM and hybrid runs under ``root``."""
    out: dict[str, list] = {}
    for sel in sorted(root.glob("**/runs/*/selection.json")):
        cfg = sel.parent / "config.yaml"
        if not cfg.is_file():
            continue
        # Read as the package reads a run's config (older layouts named the kind elsewhere).
        reward = Stage1Config.make(**(yaml.safe_load(cfg.read_text()) or {})).reward
        if reward.kind not in ("vlm", "hybrid"):
            continue
        d = json.loads(sel.read_text())
        key = (reward.model, tuple(reward.vlm_micro_tasks) if reward.kind == "hybrid" else ())
        out.setdefault(key, []).append((str(sel.parent.relative_to(REPO)), d["best"]["test"]["success_rate"],
                                                        d["final"]["test"]["success_rate"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", type=Path)
    ap.add_argument("--runs", type=Path, default=REPO / "results")
    ap.add_argument("--out", type=Path, default=REPO / "results/learnability/qualify_table.md")
    ap.add_argument("--map", type=Path, default=MAP_FILE, help="the fitted map the verdicts are read from")
    ap.add_argument("--png", type=Path, default=REPO / "results/learnability/qualify/map_scorers.png")
    a = ap.parse_args(argv)
    runs = pixel_runs(a.runs)
    fitted = load_map(a.map)
    points = {}
    f = lambda x: "n/a" if x is None or x != x else f"{x:.2f}"  # noqa: E731
    head = ["scorer", *METRICS, "behaviours >= expert", "verdict", "pixel runs (test success best / final)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path in sorted(a.reports.glob("qualify_*.json")):
        r = json.loads(path.read_text())
        v, ci = r["pooled"]["value"], r["pooled"]["ci"]
        r["map"] = scorer_verdict(v, r["behaviours_at_or_above_expert"], fitted)
        staged = path.with_name(f".{path.name}.tmp")  # the report is swapped in whole, never left half-written
        staged.write_text(json.dumps(r, indent=1, default=float))
        os.replace(staged, path)
        points[r["scorer"]] = v
        cells = [f"{f(v[k])} [{f(ci[k][0])}, {f(ci[k][1])}]" for k in METRICS]
        m = r["map"]
        verdict = m["verdict"] + (f" (P {f(m['p_teaches'])}, 90% [{f(m['p_interval_90'][0])}, {f(m['p_interval_90'][1])}];"
                                  f" nearest {', '.join(m['nearest_conditions'])})" if "p_teaches" in m else "")
        pix = "; ".join(f"`{run}` {b:.3f} / {fi:.3f}" for run, b, fi in runs.get((r.get("model") or "", tuple(r.get("vlm_micro_tasks") or ())), [])) or "-"
        lines.append("| " + " | ".join([r["scorer"], *cells, ", ".join(r["behaviours_at_or_above_expert"]) or "none",
                                        verdict, pix]) + " |")
    a.out.write_text("\n".join(lines) + "\n")
    a.png.parent.mkdir(parents=True, exist_ok=True)
    plot_map(fitted, points, a.png)
    print("\n".join(lines))
    print(f"wrote {a.out}, {a.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

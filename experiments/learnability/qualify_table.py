"""Tabulates `rmtl qualify` reports (qualify_*.json) as results/learnability/qualify_table.md, with each
model's pixel runs (committed kept runs whose reward.model is that model; for a hybrid's report, the
hybrid runs that give the model the same micro-tasks) beside its verdict.

    python experiments/learnability/qualify_table.py REPORT_DIR [--runs results] [--out ...] [--map MAP.json]

Each verdict is read again from ``--map`` (the committed map by default) and each report's JSON is
updated to it, so a map fitted after the reports were made needs no new scoring; the scorers'
points are drawn on one map (``--png``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from pipeline.qualify import load_map, map_axes, plot_map
from pipeline.qualify.learnability_map import maps_one_score, reward_verdict
from pipeline.qualify.trap import trap_hold
from rmtl.tasks import get_task
from rmtl.train.config import Stage1Config
from storage.whole_file import write_file_whole

REPO = Path(__file__).resolve().parents[2]
EARLY = ("grasp_early_snr", "grasp_early_u", "approach_early_u", "align_early_u")
"""The early-progress axes shown (docs/reward_quality.md); n/a for reports made before them."""


def is_one_score(report: dict) -> bool:
    """Whether a qualify report scores a one-score reward (a single-prompt configuration, or a state kind
    with one score)."""
    conf = report.get("configuration") or {}
    return bool(conf.get("single_prompt") or conf.get("one_score"))


def pixel_runs(root: Path, single_prompt: bool = False) -> dict[tuple[str, tuple[str, ...]], list[tuple[str, float, float, str]]]:
    """(model, micro-tasks it scores in a hybrid, () for all) -> [(run, best test success, final test
    success, learner)] of the kept VLM and hybrid runs under ``root`` with the micro-task prompts (a
    single-prompt run is another reward: ``single_prompt`` lists those instead, learner = variant);
    a run stopped before its steps says where it stopped. The
    learner is the run's variant, "warm-started" when it began from another run's policy: the map
    predicts a ``rmtl`` learner from scratch, so the others are ablations or controls beside it."""
    out: dict[str, list] = {}
    for sel in sorted(root.glob("**/selection.json")):
        cfg_file = sel.parent / "config.yaml"
        if not cfg_file.is_file():
            continue
        # Read as the package reads a run's config (older layouts named the kind elsewhere).
        cfg = Stage1Config.make(**(yaml.safe_load(cfg_file.read_text()) or {}))
        reward = cfg.reward
        if reward.kind not in ("vlm", "hybrid") or reward.single_prompt != single_prompt:
            continue
        d = json.loads(sel.read_text())
        name = f"`{sel.parent.resolve().relative_to(REPO)}`"
        reached = d["final"].get("num_timesteps") or 0
        if reached < cfg.requested_timesteps:
            name += f" (stopped at {reached // 1000}k of {cfg.requested_timesteps // 1000}k)"
        key = (reward.model, tuple(reward.vlm_micro_tasks) if reward.kind == "hybrid" else ())
        learner = cfg.variant + (" warm-started" if cfg.init_policy else "")
        out.setdefault(key, []).append((name, d["best"]["test"]["success_rate"], d["final"]["test"]["success_rate"],
                                        learner))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", type=Path)
    ap.add_argument("--runs", type=Path, default=REPO / "results")
    ap.add_argument("--out", type=Path, default=REPO / "results/learnability/qualify_table.md")
    ap.add_argument("--map", type=Path, default=None, help="the fitted map the verdicts are read from (default: the task's)")
    ap.add_argument("--png", type=Path, default=REPO / "results/learnability/qualify/map_scorers.png")
    a = ap.parse_args(argv)
    runs = pixel_runs(a.runs)
    one_prompt = pixel_runs(a.runs, single_prompt=True)
    fitted = load_map(a.map)
    task = get_task()
    axes = map_axes(task)
    points = {}
    f = lambda x: "n/a" if x is None or x != x else f"{x:.2f}"  # noqa: E731
    head = ["scorer", *axes, *EARLY, "behaviours >= expert", "trap share (ratio)", "verdict",
            "pixel runs (test success best / final)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path in sorted(a.reports.glob("qualify_*.json")):
        r = json.loads(path.read_text())
        v, ci = r["pooled"]["value"], r["pooled"]["ci"]
        conf = r.get("configuration") or {}
        one_score = is_one_score(r)
        if not one_score or maps_one_score(fitted):  # else the report's own "unmapped" stays
            r["map"] = trap_hold(reward_verdict(v, r.get("early_progress"), r["behaviours_at_or_above_expert"], fitted,
                                                one_score=one_score), r.get("trap") or {})
        write_file_whole(path, json.dumps(r, indent=1, default=float))  # never left half-written
        points[r["scorer"]] = v
        cells = [f"{f(v[k])} [{f(ci[k][0])}, {f(ci[k][1])}]" for k in axes]
        cells += [f((r.get("early_progress") or {}).get(k)) for k in EARLY]
        m = r["map"]
        verdict = m["verdict"] + (f" (P {f(m['p_teaches'])}, 90% [{f(m['p_interval_90'][0])}, {f(m['p_interval_90'][1])}];"
                                  f" nearest {', '.join(m['nearest_conditions'])})" if "p_teaches" in m else "")
        verdict += ", held by its trap share" if m.get("held") == "trap" else ""
        key = (r.get("model") or "", tuple(r.get("vlm_micro_tasks") or ()))
        mine = runs.get(key, []) if not conf.get("single_prompt") else [
            x for x in one_prompt.get(key, []) if x[3].split()[0] == conf.get("variant")]
        pix = "; ".join(f"{run}{'' if lr in ('rmtl', conf.get('variant')) else f' ({lr})'} {b:.3f} / {fi:.3f}"
                        for run, b, fi, lr in mine) or "-"
        trap = r.get("trap") or {}
        trapped = f"{f(trap['trap_share'])} ({f(trap['trap_ratio'])})" if "trap_share" in trap else "n/a"
        lines.append("| " + " | ".join([r["scorer"], *cells, ", ".join(r["behaviours_at_or_above_expert"]) or "none",
                                        trapped, verdict, pix]) + " |")
    a.out.write_text("\n".join(lines) + "\n")
    a.png.parent.mkdir(parents=True, exist_ok=True)
    plot_map(fitted, points, a.png, task.map_plane)
    print("\n".join(lines))
    print(f"wrote {a.out}, {a.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

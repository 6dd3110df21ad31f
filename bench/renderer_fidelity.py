"""Does a lighter renderer change the reward? Gate-store quality and per-view score error.

Renders the same held-out expert episodes (same seeds: rows are matched by episode and
step, and their states checked equal) once per renderer setting, embeds them with the same model and precision,
and reports for each setting: render ms per 6-view step (median of repeats, measured
side by side in this run), the reward-quality gates of ``rmtl reward-quality``, and the
absolute difference of every view's score (each micro-task prompt, alpha 0.9) and of the
multi-view active score against the full renderer, row by row.

    python bench/renderer_fidelity.py --episodes 400 --seed 100000

Writes ``results/bench/renderer_fidelity.json`` and prints a table. Tolerances (the
lighter renderer becomes the default only within them): every gate of the full renderer
that passes still passes, no within-phase rank drops by more than 0.01, and the
multi-view active score differs by at most 0.01 on average (about half the
step-to-step change the shaping reads, docs/env.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

SETTINGS = {
    "full": {"cull_invisible": False, "mesh_reduction": 0.0, "msaa_samples": 4},
    "culled": {"cull_invisible": True, "mesh_reduction": 0.0, "msaa_samples": 4},
    "lod75": {"cull_invisible": True, "mesh_reduction": 0.75, "msaa_samples": 4},
    "lod75_noaa": {"cull_invisible": True, "mesh_reduction": 0.75, "msaa_samples": 0},
    "lod90_noaa": {"cull_invisible": True, "mesh_reduction": 0.9, "msaa_samples": 0},
    "lod90": {"cull_invisible": True, "mesh_reduction": 0.9, "msaa_samples": 4},
}
TOL_ACTIVE_MEAN_ABS = 0.01
TOL_RANK_DROP = 0.01


def render_ms(settings: dict, repeats: int = 5, n: int = 20) -> float:
    """Median ms per six-view render of one state (bench/render.py's frames_per_second)."""
    from render import frames_per_second  # bench/render.py: this folder is the script's path
    from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv
    from rmtl.tasks.fetch_lift.cameras import VIEW_NAMES

    env = FetchPickAndLiftEnv(render=settings)
    env.reset(seed=3, options={"difficulty": 0.5})
    fps = frames_per_second(env, 96, repeats, renders=n)
    env.close()
    return 1000.0 * len(VIEW_NAMES) / fps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=400)
    ap.add_argument("--seed", type=int, default=100000)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS))
    ap.add_argument("--model", default="rmtl-fetch-tiny")
    ap.add_argument("--precision", default=None, help="default: the automatic choice (bf16 on CPUs with native bf16)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--stores", type=Path, default=None, help="default: <data dir>/stores")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "renderer_fidelity.json")
    args = ap.parse_args(argv)

    import rmtl  # noqa: F401
    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig
    from pipeline.stores.stored_text import stored_text_embeddings
    from rmtl.tasks.fetch_lift.phases import rule_phase
    from rmtl.provenance import data_dir, portable_values, versions
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.tasks import get_task
    from rmtl.task import QualityInputs
    from rmtl.tasks.fetch_lift.quality import gate_report, reward_quality
    from rmtl.tasks.fetch_lift.state import gripper_cube_distance
    from rmtl.vlm import load_vlm
    from storage.dataset import DatasetStore

    stores = args.stores or data_dir() / "stores"
    vlm = load_vlm(args.model, precision=args.precision)
    ms = {name: render_ms(SETTINGS[name]) for name in args.settings}  # side by side, before the load of rendering
    results, scores = {}, {}
    for name in args.settings:
        path = stores / f"gate_{name}.zarr"
        cfg = RolloutConfig.make(episodes=args.episodes, policy="expert", seed=args.seed, resolution=vlm.image_size,
                                 render=SETTINGS[name])
        t0 = time.perf_counter()
        render_to_store(path, cfg, workers=args.workers)
        embed_store(path, vlm)
        with DatasetStore.open(path, "r") as store:
            n = store.embedded_rows(vlm.model_id)
            cols = store.read(slice(0, n), fields=["state", "episode", "step"])
            text = stored_text_embeddings(store, vlm.model_id, get_task().prompts())
            emb = store.embeddings(vlm.model_id, slice(0, n))
            q = reward_quality(QualityInputs(emb, cols["state"], cols["episode"], cols["step"], store.views),
                               text.goals, text.baseline, 0.9)
        order = np.lexsort((cols["step"], cols["episode"]))  # rows arrive in worker order: align by (episode, step)
        scores[name] = (goal_baseline_scores(emb, text.goals, text.baseline, 0.9)[order], cols["state"][order])
        results[name] = {"settings": SETTINGS[name], "store": str(path), "rows": int(n),
                         "render_ms_6_views_96px": round(ms[name], 2), "seconds_render_embed": round(time.perf_counter() - t0, 1),
                         "quality_mean": q["mean"], "gates": gate_report(q)}
        print(f"{name}: {n} rows, {ms[name]:.1f} ms/6 views", flush=True)
    ref = "full" if "full" in scores else args.settings[0]
    s_ref, st = scores[ref]
    phase = rule_phase(np.asarray(gripper_cube_distance(st)))
    rows = np.arange(len(phase))
    for name in args.settings:
        s = scores[name][0]
        assert np.allclose(scores[name][1], st), f"{name} rows are not the same states as {ref}"
        d = np.abs(s - s_ref)  # [N, V, K]
        active = np.abs(s.mean(1)[rows, phase] - s_ref.mean(1)[rows, phase])
        r = results[name]
        r["score_abs_diff_vs_" + ref] = {
            "per_view_per_prompt_mean": np.round(d.mean(0), 5).tolist(),
            "per_view_per_prompt_p99": np.round(np.percentile(d, 99, axis=0), 5).tolist(),
            "per_view_max": np.round(d.max(axis=(0, 2)), 5).tolist(),
            "active_multi_view_mean": round(float(active.mean()), 5),
            "active_multi_view_p99": round(float(np.percentile(active, 99)), 5),
            "active_multi_view_max": round(float(active.max()), 5),
        }
        qm, qr = r["quality_mean"], results[ref]["quality_mean"]
        drops = {k: qr[k] - qm[k] for k in ("approach_spearman", "align_spearman", "grasp_auc", "right_prompt_accuracy")}
        r["rank_drop_vs_" + ref] = {k: round(float(v), 4) for k, v in drops.items()}
        r["within_tolerance"] = bool(
            all(r["gates"][k] or not results[ref]["gates"][k] for k in r["gates"])
            and max(drops.values()) <= TOL_RANK_DROP and active.mean() <= TOL_ACTIVE_MEAN_ABS)
    out = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "model": vlm.model_id, "precision": vlm.precision,
           "episodes": args.episodes, "seed": args.seed, "reference": ref, "views": "all six, bank order",
           "tolerances": {"active_multi_view_mean_abs": TOL_ACTIVE_MEAN_ABS, "rank_drop": TOL_RANK_DROP,
                          "gates": "every gate the reference passes still passes"},
           "versions": versions(), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(portable_values(out), indent=1, default=float))
    print(f"{'setting':12s} {'ms/6v':>6s} {'approach':>8s} {'align':>7s} {'grasp':>7s} {'right':>7s} {'|ds| mean':>9s} {'p99':>7s} ok")
    for name, r in results.items():
        q, d = r["quality_mean"], r["score_abs_diff_vs_" + ref]
        print(f"{name:12s} {r['render_ms_6_views_96px']:6.1f} {q['approach_spearman']:8.3f} {q['align_spearman']:7.3f} "
              f"{q['grasp_auc']:7.4f} {q['right_prompt_accuracy']:7.3f} {d['active_multi_view_mean']:9.4f} "
              f"{d['active_multi_view_p99']:7.4f} {r['within_tolerance']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the time of Stage-1 training goes, per env step: simulation, rendering, embedding,
cache lookup, policy/other, PPO update.

Runs ``train_stage1`` for a short run of each variant at the given sizes (default: the
paper's 16 envs x n_steps 40, RMTL's 6 views at the model's input size) and reads the
timers of rmtl.train.run.timing. GL contexts and the model are warmed up before timing.

    python bench/train.py                                   # rmtl + dense_reference, 2 rollouts
    python bench/train.py --variants rmtl --vec-env subproc --rollouts 3
    python bench/train.py --variants rmtl --cache-store data/stores/x.zarr --cache-radius 0.002
    python bench/train.py --variants rmtl --compare-cache --cache-store data/stores/x.zarr \
        --cache-radius 0.02 --cache-grow --repeats 3 --out results/bench/train_cache_vs_fresh.json

``--compare-cache`` times each variant without and with the cache, alternating, ``--repeats``
times (each cached run on a fresh copy of the store, so every repeat starts equally warm
and the store itself is never changed), and reports the medians and their ratio.

Writes ``results/bench/train.json`` (one entry per run, plus machine info) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("simulation", "rendering", "embedding", "cache_lookup", "policy_and_other", "ppo_update")


def _warmup_callback(views, resolution):
    from stable_baselines3.common.callbacks import BaseCallback

    class Warmup(BaseCallback):
        """Create every sub-env's GL context before the timers run (first render ~0.5 s per env)."""

        def _on_training_start(self) -> None:
            if views:
                self.training_env.env_method("render_views", list(views), int(resolution))

        def _on_step(self) -> bool:
            return True

    return Warmup()


def bench_cache_pairs(variant: str, args: argparse.Namespace, model_spec: str, vlm) -> dict:
    """Fresh (render + embed every step) and cached runs of one variant, alternating."""
    import shutil
    import statistics

    fresh, cached = [], []
    for _ in range(args.repeats):
        fresh.append(bench_one(variant, argparse.Namespace(**{**vars(args), "cache_store": None}), model_spec, vlm))
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / Path(args.cache_store).name
            shutil.copytree(args.cache_store, copy)
            if Path(str(args.cache_store) + ".cache").is_dir():
                shutil.copytree(str(args.cache_store) + ".cache", str(copy) + ".cache")
            run = bench_one(variant, argparse.Namespace(**{**vars(args), "cache_store": str(copy)}), model_spec, vlm)
            run["cache_store"] = args.cache_store
            cached.append(run)
    med = lambda runs, key: round(statistics.median(r[key] for r in runs), 2)  # noqa: E731
    key = "env_steps_per_s_with_updates"
    return {
        "variant": variant, "repeats": args.repeats, "cache_radius": args.cache_radius, "cache_grow": args.cache_grow,
        "fresh_env_steps_per_s_median": med(fresh, key), "cached_env_steps_per_s_median": med(cached, key),
        "speedup_median": round(med(cached, key) / med(fresh, key), 2),
        "cached_hit_rate_median": statistics.median(r["cache_stats"]["hit_rate"] for r in cached),
        "fresh_runs": fresh, "cached_runs": cached,
    }


def bench_one(variant: str, args: argparse.Namespace, model_spec: str, vlm) -> dict:
    from rmtl.train import stage1_config
    from rmtl.tasks import get_task
    from rmtl.train.stage1 import train_stage1

    overrides: dict = {
        "n_envs": args.n_envs, "n_steps": args.n_steps, "total_timesteps": args.n_envs * args.n_steps * args.rollouts,
        "checkpoint_every": 10**9, "eval_every": 0, "eval_episodes": 1, "progress_bar": False,
        "vec_env": args.vec_env, "torch_threads": args.torch_threads, "seed": args.seed,
    }
    from rmtl.train.variants import VARIANT_REGISTRY, variant_kind

    vlm_run = variant_kind(VARIANT_REGISTRY[variant]) == "vlm"
    if vlm_run:  # the model and views are the VLM reward's: another kind's config has no such fields
        overrides["reward"] = {"model": model_spec, "batch_size": args.batch_size}
        if args.views:
            overrides["reward"]["views"] = args.views
        if args.resolution:
            overrides["reward"]["resolution"] = args.resolution
    if args.cache_store:
        overrides["cache"] = {"store": args.cache_store, "radius": args.cache_radius, "grow": args.cache_grow}
    with tempfile.TemporaryDirectory() as tmp:
        overrides["output_dir"] = str(Path(tmp) / variant)
        cfg = stage1_config(variant, **overrides)
        resolution = (cfg.reward.resolution or (vlm.image_size if vlm is not None else 96)) if vlm_run else None
        views = get_task(cfg.task).reward_config(cfg.reward).active_views if vlm_run else ()
        t0 = time.perf_counter()
        run = train_stage1(cfg, resume=False, vlm=vlm if vlm_run else None,
                           callbacks=[_warmup_callback(views, resolution)])
        wall = time.perf_counter() - t0
        summary = json.loads((run / "summary.json").read_text())
    secs = summary["timings_seconds_this_session"]
    steps = summary["env_steps"]
    rollout_s = sum(secs.get(p, 0.0) for p in PARTS if p != "ppo_update")
    train_s = rollout_s + secs.get("ppo_update", 0.0)
    return {
        "variant": variant,
        "model": model_spec if vlm_run else None,
        "n_envs": cfg.n_envs, "n_steps": cfg.n_steps, "env_steps": steps, "vec_env": cfg.vec_env,
        "views": list(views), "resolution": resolution,
        "cache_store": args.cache_store, "cache_stats": summary.get("cache_stats"),
        "seconds": {p: round(secs.get(p, 0.0), 3) for p in PARTS},
        "ms_per_env_step": {p: round(1000 * secs.get(p, 0.0) / steps, 3) for p in PARTS},
        "share": {p: round(secs.get(p, 0.0) / train_s, 3) for p in PARTS} if train_s else {},
        "env_steps_per_s_rollout": round(steps / rollout_s, 1) if rollout_s else None,
        "env_steps_per_s_with_updates": round(steps / train_s, 1) if train_s else None,
        "wall_seconds_incl_setup_and_final_eval": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=["rmtl", "dense_reference"])
    ap.add_argument("--model", default="rmtl-fetch-tiny",
                    help="reward model spec; falls back to <model>@random (same speed) when its weights are missing")
    ap.add_argument("--n-envs", type=int, default=16)
    ap.add_argument("--n-steps", type=int, default=40)
    ap.add_argument("--rollouts", type=int, default=2, help="PPO iterations to time")
    ap.add_argument("--views", nargs="+", default=None, help="default: RMTL's six views")
    ap.add_argument("--resolution", type=int, default=None, help="default: the model's input size")
    ap.add_argument("--batch-size", type=int, default=64, help="VLM images per model call")
    ap.add_argument("--vec-env", choices=["dummy", "subproc"], default="dummy")
    ap.add_argument("--torch-threads", type=int, default=None)
    ap.add_argument("--cache-store", default=None)
    ap.add_argument("--cache-radius", type=float, default=0.002)
    ap.add_argument("--cache-grow", action="store_true")
    ap.add_argument("--compare-cache", action="store_true",
                    help="time each variant without and with --cache-store, alternating --repeats times")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0,
                    help="training seed; with --compare-cache use one the store's own run did not use, "
                         "or the first rollout replays stored states exactly (an all-hit upper bound)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "train.json")
    args = ap.parse_args(argv)
    if args.compare_cache and not args.cache_store:
        ap.error("--compare-cache needs --cache-store (a store with embeddings of --model)")

    import torch

    import rmtl  # noqa: F401
    from rmtl.errors import ModelLoadError
    from rmtl.provenance import versions
    from rmtl.vlm import load_vlm

    vlm, spec = None, args.model
    if any(v != "dense_reference" for v in args.variants):
        try:
            vlm = load_vlm(spec)
        except ModelLoadError as err:
            spec = spec.split("@")[0] + "@random"
            print(f"{err}\n-> timing {spec} (same architecture, same speed)", file=sys.stderr)
            vlm = load_vlm(spec)
    if args.compare_cache:
        pairs = [bench_cache_pairs(v, args, spec, vlm) for v in args.variants]
        results = [r for p in pairs for r in p["fresh_runs"] + p["cached_runs"]]
    else:
        pairs, results = None, [bench_one(v, args, spec, vlm) for v in args.variants]
    out = {
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "cuda": torch.cuda.is_available(),
                    "torch_threads": torch.get_num_threads(), "load_avg_at_end": os.getloadavg()},
        "versions": versions(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "runs": results,
    }
    if pairs is not None:
        out["cache_comparison"] = [{k: v for k, v in p.items() if not k.endswith("_runs")} for p in pairs]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    head = f"{'variant':28s} {'envs':>4s} {'views':>5s} {'px':>4s} " + " ".join(f"{p[:10]:>10s}" for p in PARTS) + "   steps/s (rollout | +update)"
    print("ms per env step")
    print(head)
    for r in results:
        ms = r["ms_per_env_step"]
        print(f"{r['variant']:28s} {r['n_envs']:4d} {len(r['views']):5d} {str(r['resolution'] or '-'):>4s} "
              + " ".join(f"{ms[p]:10.2f}" for p in PARTS)
              + f"   {r['env_steps_per_s_rollout']} | {r['env_steps_per_s_with_updates']}")
    for p in pairs or []:
        print(f"{p['variant']}: fresh {p['fresh_env_steps_per_s_median']} env steps/s, cached "
              f"{p['cached_env_steps_per_s_median']} (hit rate {p['cached_hit_rate_median']:.2f}), "
              f"x{p['speedup_median']} (medians of {p['repeats']}, alternating)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

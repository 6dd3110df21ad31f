"""Stage-1 VLM-reward training speed: today's path against the fast path, side by side.

Paths (the same RMTL config, the shipped model; only the machinery differs):

- ``today``: full meshes, no culling, 4x MSAA, fp32 embedding, all envs in the learner
  process (DummyVecEnv), no cache;
- ``fast``: culled geometry, the fast renderer (``--render``), bf16 where the CPU has it,
  ``ProcessGroupVecEnv`` workers (one per core), no cache;
- ``fast_atlas``: ``fast`` plus the warm atlas catalogue (``--atlas``) at ``--radius``,
  misses appended to a fresh overlay by the background writer;
- ``new``: ``fast`` with the CPU stand-in (``--new-model``, default ``rmtl-fetch-fast-r5``: a
  64 px ConvNeXt tower) on the renderer it declares (``rmtl-fetch-fast-r5``: no anti-aliasing,
  meshes decimated 0.9; frames at its 64 px input),
  with the reward settings ``--new-reward`` (default: the tower through ``torch.compile``,
  all 96 frames of a step in one model call). ``--fast-reward`` gives the other paths
  settings of their own (default none), e.g. the new path's, to see what they are worth there;
- ``new_no_skybox``: ``new`` with the skybox off (``env.render.skybox``): a lighter renderer a
  new model may be trained on (its pixels differ, so never for the model of ``new`` itself);
- ``oracle`` and ``rule_only``: the state-reading references (variants ``oracle_rmtl`` and
  ``rule_only``), nothing rendered or embedded, run as their sweeps run them (``vec_env: dummy``,
  one torch thread: one run per core), so a pixel path's cost is read against them.

Each repeat runs every path once (alternating, so load drifts hit all alike) for
``--rollouts`` PPO iterations of 16 envs x 40 steps after a warm-up; medians over repeats.

    python bench/train_fast_path.py --atlas data/stores/atlas_*.zarr --radius 0.02 --repeats 3

What a real run pays besides its training steps is measured too and turned into a prediction
of a whole run's wall time (:func:`predict_run_seconds`): the per-episode cost of the
evaluation, validation and test episodes (run in the learner process, one core), the time of
a checkpoint, and the start-up (model load and compile, worker start). ``--run-shape`` gives
the run to predict (default: the pixel sweeps' 600k runs); ``--check RUN_DIR ...`` predicts
finished runs of the same path from their ``config.yaml`` and sets the prediction beside their
``wall_seconds``.

Writes ``results/bench/train_fast_path.json`` (``speedup_uncached``, ``speedup_warm_atlas``:
median env steps/s with PPO updates over today's; ``speedup_new_vs_fast``: ``new`` over
``fast``; ``projected_600k_hours`` per path; all from the same run) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("simulation", "rendering", "embedding", "cache_lookup", "policy_and_other", "ppo_update")
"""The parts of a training step (a bench run neither evaluates nor checkpoints while timed)."""
TODAY_RENDER = {"cull_invisible": False, "mesh_reduction": 0.0, "msaa_samples": 4}
# Paths without a VLM -> their Stage-1 variant, timed as experiments/oracle_structure runs them.
STATE_PATHS = {"oracle": "oracle_rmtl", "rule_only": "rule_only"}
ALL_PATHS = ("today", "fast", "fast_atlas", "new", "new_no_skybox", *STATE_PATHS)
EVAL_EPISODES_TIMED = 20
"""Episodes of the final evaluation every bench run ends with: what one evaluation episode costs."""
PIXEL_RUN = {"total_timesteps": 600_320, "eval_every": 20_000, "eval_episodes": 50, "checkpoint_every": 40_000,
             "validation_episodes": 100, "test_episodes": 200, "keep_results": True}
"""The run the prediction is for by default: the pixel sweeps' (experiments/pixel/*.yaml)."""
CHECKPOINT_SECONDS = 0.5
"""One checkpoint's save and the best policy's copy (the profile of a real run: results/bench/run_account.md)."""


def run_path(name: str, args, vlms: dict) -> dict:
    if name in STATE_PATHS:
        return run_state_path(name, args)
    from rmtl.train import stage1_config
    from rmtl.train.stage1 import train_stage1

    fast = name != "today"
    render = json.loads(args.render) if fast else TODAY_RENDER
    if name in ("new", "new_no_skybox"):  # the model's own renderer: what it was trained on
        from rmtl.vlm.registry import declared_renderer

        render = {**render, **(declared_renderer(args.new_model) or {})}
        if name == "new_no_skybox":  # the lighter renderer a new model may be trained on (other pixels)
            render["skybox"] = False
    vlm = vlms[name]
    over = {
        **ppo_size(args),
        "vec_env": "workers" if fast else "dummy",
        "env": {"render": render},
        "reward": {"model": args.new_model if name.startswith("new") else args.model, "precision": vlm.precision,
                   **json.loads(args.new_reward if name.startswith("new") else args.fast_reward)},
    }
    with tempfile.TemporaryDirectory() as tmp:
        if name == "fast_atlas":
            over["cache"] = {"atlas": list(args.atlas), "radius": args.radius, "overlay": str(Path(tmp) / "overlay.zarr"),
                             "audit_every": 10}
        over["output_dir"] = str(Path(tmp) / name)
        cfg = stage1_config("rmtl", **over)
        t0 = time.perf_counter()
        run = train_stage1(cfg, resume=False, vlm=vlm)
        wall = time.perf_counter() - t0
        summary = json.loads((run / "summary.json").read_text())
        timing = run_timing(run, cfg)
    return {"path": name, **timing, "cache_stats": summary.get("cache_stats"), "wall_seconds": round(wall, 1),
            "render": over["env"]["render"], "model": vlm.model_id, "resolution": vlm.image_size,
            "precision": vlm.precision, "compiled": bool(getattr(vlm, "compiled", False)),
            "reward_settings": {k: v for k, v in over["reward"].items() if k not in ("model", "precision")},
            "vec_env": over["vec_env"]}


def run_state_path(name: str, args) -> dict:
    """A state-reading reference (oracle or rule-only) at the same PPO size, as its sweeps run it."""
    import torch

    from rmtl.train import stage1_config
    from rmtl.train.stage1 import train_stage1

    threads = torch.get_num_threads()  # the run sets one thread; the VLM paths after it keep theirs
    over = {**ppo_size(args), "vec_env": "dummy", "torch_threads": 1}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = stage1_config(STATE_PATHS[name], output_dir=str(Path(tmp) / name), **over)
            t0 = time.perf_counter()
            run = train_stage1(cfg, resume=False)
            wall = time.perf_counter() - t0
            timing = run_timing(run, cfg)
    finally:
        torch.set_num_threads(threads)
    return {"path": name, **timing, "wall_seconds": round(wall, 1), "variant": STATE_PATHS[name],
            "reward_kind": cfg.reward.kind, "vec_env": over["vec_env"], "torch_threads": over["torch_threads"]}


def ppo_size(args) -> dict:
    """What every path is timed at: 16 envs x 40 steps, one warm-up rollout and ``--rollouts`` timed
    ones, no checkpoints or evaluations in between."""
    return {"n_envs": 16, "n_steps": 40, "total_timesteps": 16 * 40 * (args.rollouts + 1), "checkpoint_every": 10**9,
            "eval_every": 0, "eval_episodes": EVAL_EPISODES_TIMED, "progress_bar": False, "seed": args.seed}


def run_timing(run: Path, cfg) -> dict:
    """A finished bench run's speed: mean ms per env step of each part over the timed rollouts (the
    first warms GL contexts and the model up), env steps/s from their sum, and how many were timed."""
    from rmtl.train.run.csv_log import read_csv

    rows = read_csv(run / "progress_000000000.csv")[1:]
    ms = {p: statistics.mean(float(r[f"time/ms_per_step_{p}"]) for r in rows) for p in PARTS if p != "ppo_update"}
    ms["ppo_update"] = statistics.mean(1000 * float(r["time/update_s"]) / (cfg.n_envs * cfg.n_steps) for r in rows
                                       if r.get("time/update_s") not in (None, ""))
    summary = json.loads((run / "summary.json").read_text())
    final = summary.get("final_eval") or {}
    episode_s = float(final["eval_seconds"]) / int(final["episodes"]) if final.get("episodes") else None
    trained = sum(ms.values()) / 1000 * int(summary["env_steps"])
    return {"rollouts_timed": len(rows), "env_steps_per_s": round(1000 / sum(ms.values()), 2),
            "ms_per_env_step": {p: round(v, 3) for p, v in ms.items()},
            "eval_episode_seconds": round(episode_s, 4) if episode_s else None,
            # what the run took beyond its steps at the timed rate and its final evaluation: start-up and warm-up
            "startup_seconds": round(float(summary["wall_seconds"]) - trained - float(final.get("eval_seconds") or 0), 1)}


def predict_run_seconds(shape: dict, ms_per_env_step: float, eval_episode_s: float, startup_s: float) -> dict:
    """A whole run's wall time by part, from a bench path's speed and overheads: its steps at the
    timed rate, the periodic evaluations, a validation per checkpoint (with keep_results), the
    test episodes, the checkpoints, the start-up."""
    steps = int(shape["total_timesteps"])
    evals = steps // int(shape["eval_every"]) if shape.get("eval_every") else 0
    checkpoints = steps // int(shape["checkpoint_every"]) if shape.get("checkpoint_every") else 0
    kept = bool(shape.get("keep_results"))
    parts = {
        "training_steps": steps * ms_per_env_step / 1000,
        "evaluations": (evals + 1) * int(shape.get("eval_episodes", 0)) * eval_episode_s,
        "validations": (checkpoints + 1) * int(shape.get("validation_episodes", 0)) * eval_episode_s if kept else 0.0,
        "checkpoints": (checkpoints + 1) * CHECKPOINT_SECONDS,
        "startup": startup_s,
    }
    # The test episodes of a kept run come after its clock stops (summary.json's wall_seconds).
    test = int(shape.get("test_episodes", 0)) * eval_episode_s if kept else 0.0
    return {"seconds": round(sum(parts.values()), 1), "parts": {k: round(v, 1) for k, v in parts.items()},
            "test_after_wall_seconds": round(test, 1)}


def run_shape(config: dict) -> dict:
    """The shape of a run (what :func:`predict_run_seconds` reads) from its config."""
    return {k: config.get(k) for k in PIXEL_RUN}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="rmtl-fetch-tiny")
    ap.add_argument("--new-model", default="rmtl-fetch-fast-r5", help="the CPU stand-in of the 'new' path")
    ap.add_argument("--new-reward", default='{"compile": true, "batch_size": 96}',
                    help="reward settings of the 'new' path (JSON; RewardConfig fields)")
    ap.add_argument("--fast-reward", default="{}", help="reward settings of the other paths (JSON), e.g. to time "
                    "the fast path with the new path's settings")
    ap.add_argument("--render", default=None, help="render settings of the fast path (JSON; default: the package's)")
    ap.add_argument("--atlas", nargs="*", default=[])
    ap.add_argument("--radius", type=float, default=0.02)
    ap.add_argument("--rollouts", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--paths", nargs="+", default=None, choices=ALL_PATHS,
                    help="subset of the paths (default: today fast [fast_atlas] new; ratios need both)")
    ap.add_argument("--run-shape", default=json.dumps(PIXEL_RUN),
                    help="the run whose wall time is predicted (JSON: total_timesteps, eval_every, eval_episodes, "
                         "checkpoint_every, validation_episodes, test_episodes, keep_results)")
    ap.add_argument("--check", nargs="*", type=Path, default=[],
                    help="finished runs of the 'new' path (run folders): their wall time beside the prediction")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "train_fast_path.json")
    args = ap.parse_args(argv)

    import torch

    import rmtl  # noqa: F401
    from rmtl.provenance import cpu_model, portable_values, run_record
    from rmtl.vlm import load_vlm

    if args.render is None:
        from rmtl.env.render_settings import RenderSettings

        args.render = json.dumps(RenderSettings().model_dump())
    paths = args.paths or (["today", "fast"] + (["fast_atlas"] if args.atlas else []) + ["new"])
    fast_compiled = bool(json.loads(args.fast_reward).get("compile", False))
    vlms = {}
    if {"today", "fast", "fast_atlas"} & set(paths):
        vlms = {"today": load_vlm(args.model, precision="fp32", compile=fast_compiled),
                "fast": load_vlm(args.model, compile=fast_compiled)}
        vlms["fast_atlas"] = vlms["fast"]
    if {"new", "new_no_skybox"} & set(paths):
        vlms["new"] = vlms["new_no_skybox"] = load_vlm(args.new_model,
                                                        compile=bool(json.loads(args.new_reward).get("compile", False)))
    runs = []
    for rep in range(args.repeats):
        for name in paths:
            r = run_path(name, args, vlms)
            r["repeat"] = rep
            runs.append(r)
            print(f"repeat {rep} {name}: {r['env_steps_per_s']} env steps/s", flush=True)
    med = {p: statistics.median(r["env_steps_per_s"] for r in runs if r["path"] == p) for p in paths}
    breakdown = {p: {k: round(statistics.median(r["ms_per_env_step"][k] for r in runs if r["path"] == p), 3) for k in PARTS}
                 for p in paths}
    # Start-up as a run pays it: the first repeat's (a process's first batch of each size is compiled then).
    over = {p: {"eval_episode_seconds": statistics.median(r["eval_episode_seconds"] for r in runs if r["path"] == p),
                "startup_seconds": next(r["startup_seconds"] for r in runs if r["path"] == p)} for p in paths}
    shape = json.loads(args.run_shape)
    predicted = {p: predict_run_seconds(shape, 1000 / med[p], over[p]["eval_episode_seconds"], over[p]["startup_seconds"])
                 for p in paths}
    checks = []
    if "new" in paths:
        import yaml

        for run in args.check:
            cfg = yaml.safe_load((run / "config.yaml").read_text())
            actual = json.loads((run / "summary.json").read_text())["wall_seconds"]
            pred = predict_run_seconds(run_shape(cfg), 1000 / med["new"], over["new"]["eval_episode_seconds"],
                                       over["new"]["startup_seconds"])
            checks.append({"run": str(run), "wall_seconds": actual, "predicted_seconds": pred["seconds"],
                           "error": round(pred["seconds"] / actual - 1, 3), "predicted_parts": pred["parts"],
                           "shape": run_shape(cfg)})
    out = {
        "predicted_run_seconds": predicted, "run_shape": shape, "checks": checks, "overheads": over,
        "speedup_uncached": round(med["fast"] / med["today"], 2) if {"fast", "today"} <= set(med) else None,
        "speedup_warm_atlas": round(med["fast_atlas"] / med["today"], 2) if {"fast_atlas", "today"} <= set(med) else None,
        "speedup_new_vs_fast": round(med["new"] / med["fast"], 2) if {"new", "fast"} <= set(med) else None,
        # How much slower the pixel reward's training is than the state-reading references.
        "new_over_oracle": round(med["new"] / med["oracle"], 3) if {"new", "oracle"} <= set(med) else None,
        "new_over_rule_only": round(med["new"] / med["rule_only"], 3) if {"new", "rule_only"} <= set(med) else None,
        "new_no_skybox_over_rule_only": (round(med["new_no_skybox"] / med["rule_only"], 3)
                                         if {"new_no_skybox", "rule_only"} <= set(med) else None),
        "projected_600k_hours": {p: round(600_000 / v / 3600, 2) for p, v in med.items()},
        "env_steps_per_s_median": med, "ms_per_env_step_median": breakdown,
        "atlas": args.atlas, "radius": args.radius, "repeats": args.repeats, "rollouts_timed": args.rollouts,
        "machine": {"host": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(), "cuda": torch.cuda.is_available(),
                    "load_avg_at_end": os.getloadavg()},
        "run": run_record(), "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(portable_values(out), indent=1, default=str))
    print(f"{'path':11s} {'steps/s':>8s} " + " ".join(f"{p[:10]:>10s}" for p in PARTS) + "  (ms per env step, medians)")
    for p in paths:
        print(f"{p:11s} {med[p]:8.1f} " + " ".join(f"{breakdown[p][k]:10.2f}" for k in PARTS))
    print(f"speedup_uncached {out['speedup_uncached']}x, speedup_warm_atlas {out['speedup_warm_atlas']}x, "
          f"speedup_new_vs_fast {out['speedup_new_vs_fast']}x, new/oracle {out['new_over_oracle']}, "
          f"new/rule_only {out['new_over_rule_only']}; projected 600k hours {out['projected_600k_hours']} "
          f"-> {args.out}")
    for p in paths:
        print(f"predicted run wall time, {p}: {predicted[p]['seconds'] / 60:.1f} min {predicted[p]['parts']}")
    for c in checks:
        print(f"check {c['run']}: {c['wall_seconds']:.0f} s measured, {c['predicted_seconds']:.0f} s predicted "
              f"({c['error']:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

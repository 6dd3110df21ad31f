"""Rendering benchmark: frames/s per view at several resolutions (shadows and
reflections off vs on, side by side) and environment steps/s with six views.

    python bench/render.py [--out results/bench/render.json] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import rmtl  # noqa: F401
from rmtl.tasks.fetch_lift.cameras import VIEW_NAMES
from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv
from rmtl.provenance import run_record
from rmtl.tasks.fetch_lift.expert import ScriptedExpert


def frames_per_second(env: FetchPickAndLiftEnv, resolution: int, repeats: int, renders: int = 5) -> float:
    env.render_views(VIEW_NAMES, resolution)  # create the renderer outside the timing
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(renders):
            env.render_views(VIEW_NAMES, resolution)
        rates.append(renders * len(VIEW_NAMES) / (time.perf_counter() - t))
    return statistics.median(rates)


def steps_per_second(env: FetchPickAndLiftEnv, resolution: int | None, repeats: int, steps: int = 40) -> float:
    expert = ScriptedExpert(noise_std=0.2, seed=0)
    rates = []
    for r in range(repeats):
        obs, _ = env.reset(seed=r)
        t = time.perf_counter()
        for _ in range(steps):
            obs, _, term, trunc, _ = env.step(expert(obs))
            if resolution is not None:
                env.render_views(VIEW_NAMES, resolution)
            if term or trunc:
                obs, _ = env.reset(seed=r + 1000)
        rates.append(steps / (time.perf_counter() - t))
    return statistics.median(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("results/bench/render.json"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--resolutions", type=int, nargs="+", default=[64, 96, 224, 720])
    args = ap.parse_args()

    plain = FetchPickAndLiftEnv(shadows=False, reflections=False)
    fancy = FetchPickAndLiftEnv(shadows=True, reflections=True)
    for env in (plain, fancy):
        env.reset(seed=0, options={"difficulty": 0.5})
    rows = []
    for res in args.resolutions:
        fps_plain = frames_per_second(plain, res, args.repeats)
        fps_fancy = frames_per_second(fancy, res, args.repeats)
        rows.append({"resolution": res, "fps_per_view": fps_plain, "fps_per_view_shadows": fps_fancy,
                     "ms_per_frame": 1000 / fps_plain, "ms_per_frame_shadows": 1000 / fps_fancy})
    steps = {
        "sim_only": steps_per_second(plain, None, args.repeats),
        "6_views_96px": steps_per_second(plain, 96, args.repeats),
        "6_views_224px": steps_per_second(plain, 224, args.repeats),
        "6_views_224px_shadows": steps_per_second(fancy, 224, args.repeats),
    }
    result = {"frames": rows, "env_steps_per_second": steps, "repeats": args.repeats,
              "statistic": "median", "record": run_record()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))

    print(f"{'res':>5} {'fps/view':>10} {'ms/frame':>9} {'fps/view+shadows':>17} {'ms/frame+shadows':>17}")
    for r in rows:
        print(f"{r['resolution']:>5} {r['fps_per_view']:>10.1f} {r['ms_per_frame']:>9.1f} "
              f"{r['fps_per_view_shadows']:>17.1f} {r['ms_per_frame_shadows']:>17.1f}")
    for k, v in steps.items():
        print(f"env steps/s {k:<24} {v:8.1f}")
    print(f"wrote {args.out}")
    plain.close()
    fancy.close()


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()

"""Two ideas for cheaper six-view frames on llvmpipe, timed against the renderer as it is.

- ``per_view``: ``CameraBankRenderer.render``, one scene update, render and pixel read per view;
- ``tiled``: one scene update, then each view rendered into its own tile of one framebuffer
  (camera and lights updated per view) and one pixel read for all six. A prototype written
  here on the renderer's internals: it is measured, not adopted.

Each runs with llvmpipe's default rasteriser threads, with ``LP_NUM_THREADS=1`` (one helper
thread) and with ``LP_NUM_THREADS=0`` (rasterise in the calling thread, what one-core workers
now use), each in a fresh process (Mesa reads the variable once). One process,
the fast stand-in's frames (64 px, no MSAA, culled, decimated meshes), medians of ``--repeats``
timings of ``--calls`` calls each.

    python bench/render_tiling.py --repeats 5

Writes ``results/bench/render_tiling.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(resolution: int, calls: int, repeats: int) -> dict:
    """In this process: ms per six-view frame of both ways, and how far their pixels differ."""
    import mujoco
    import numpy as np

    from rmtl.tasks import get_task

    env = get_task("fetch_lift").make_env(views=("all",), resolution=resolution, render={"msaa_samples": 0})
    env.reset(seed=0)
    views = tuple(env.config.views)
    env.render_views(views, resolution)
    bank = env._cameras  # the prototype needs the renderer's context, scene and cameras
    r = bank._renderer(resolution)
    option = bank._culling if bank.culled else bank._all_groups
    cams = [bank._cameras[v] for v in views]
    n, res = len(views), resolution
    tiles = np.empty((res, n * res, 3), np.uint8)

    def tiled() -> np.ndarray:
        data = bank._lod.sync() if bank._lod is not None else bank.data
        r.update_scene(data, camera=cams[0], scene_option=option)
        r._gl_context.make_current()
        for i, cam in enumerate(cams):
            mujoco.mjv_updateCamera(bank.model, data, cam, r._scene)
            mujoco.mjv_makeLights(bank.model, data, r._scene)  # the headlight follows the camera
            mujoco.mjr_render(mujoco.MjrRect(i * res, 0, res, res), r._scene, r._mjr_context)
        mujoco.mjr_readPixels(tiles, None, mujoco.MjrRect(0, 0, n * res, res), r._mjr_context)
        return np.flipud(tiles).reshape(res, n, res, 3).transpose(1, 0, 2, 3).copy()

    differing, max_diff = [], 0
    rng = np.random.default_rng(0)
    for _ in range(10):
        env.step(rng.uniform(-1, 1, 4))
        a, b = env.render_views(views, res).astype(np.int16), tiled().astype(np.int16)
        differing.append(float((a != b).mean()))
        max_diff = max(max_diff, int(np.abs(a - b).max()))

    def ms(fn) -> float:
        fn()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls * 1e3

    per_view = [ms(lambda: bank.render(views, res)) for _ in range(repeats)]
    tile = [ms(tiled) for _ in range(repeats)]
    env.close()
    return {"per_view_ms": statistics.median(per_view), "tiled_ms": statistics.median(tile),
            "per_view_ms_all": per_view, "tiled_ms_all": tile,
            "tiled_pixels_differing": statistics.mean(differing), "tiled_max_abs_diff": max_diff}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--resolution", type=int, default=64)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "render_tiling.json")
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(measure(a.resolution, a.calls, a.repeats)))
        return 0
    from rmtl.provenance import run_record

    rows = {}
    # 1: what a one-core Stage-1 worker had before it rasterised in its own thread (rmtl.env.threads)
    for label, lp in (("llvmpipe_default_threads", None), ("LP_NUM_THREADS=1", "1"), ("LP_NUM_THREADS=0", "0")):
        env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "OMP_NUM_THREADS": "1"}
        env.pop("LP_NUM_THREADS", None)
        if lp is not None:
            env["LP_NUM_THREADS"] = lp
        out = subprocess.run([sys.executable, __file__, "--child", "--resolution", str(a.resolution), "--calls",
                              str(a.calls), "--repeats", str(a.repeats)], env=env, check=True, capture_output=True,
                             text=True, cwd=ROOT)
        rows[label] = json.loads(out.stdout.strip().splitlines()[-1])
    result = {"resolution": a.resolution, "views": 6, "msaa_samples": 0, "calls": a.calls, "repeats": a.repeats,
              "rows": rows, "load_avg_at_end": list(os.getloadavg()),
              "run": run_record()}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1))
    print(f"{'llvmpipe threads':<26}{'per view ms':>12}{'tiled ms':>10}{'tiled/per view':>16}")
    for label, r in rows.items():
        print(f"{label:<26}{r['per_view_ms']:>12.3f}{r['tiled_ms']:>10.3f}{r['tiled_ms'] / r['per_view_ms']:>16.2f}")
    print(f"tiled frames: {100 * rows['llvmpipe_default_threads']['tiled_pixels_differing']:.4f}% of values differ, "
          f"by at most {rows['llvmpipe_default_threads']['tiled_max_abs_diff']} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())

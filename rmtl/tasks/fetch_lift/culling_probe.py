"""The culling probe: finds the geoms no bank camera ever shows and writes the shipped list
(``python -m rmtl.tasks.fetch_lift.culling_probe``; the list and its use: rmtl.env.culling)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from collections.abc import Sequence

import numpy as np

from rmtl.env.cameras import _preload_triton, free_camera
from rmtl.tasks.fetch_lift.cameras import CAMERA_BANK, fetch_views
from rmtl.env.culling import CULLED_GEOMS_FILE, CullingProbe, geom_label
from rmtl.env.episode import run_episode
from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv


def find_invisible_geoms(episodes: int = 60, resolution: int = 224, every: int = 2, seed: int = 0,
                         views: Sequence[str] | None = None, progress: bool = False) -> CullingProbe:
    """Geoms never visible in any view over ``episodes`` random-action episodes.

    Difficulties cycle through [0, 1] so every curriculum stage's start poses are
    probed; every ``every``-th step of each episode is rendered from all views.
    Geoms already invisible (alpha 0, e.g. hidden markers) count as invisible too.
    """
    import mujoco

    names = fetch_views(views)
    _preload_triton()
    env = FetchPickAndLiftEnv(render={"cull_invisible": False})
    model, data = env.model, env.data
    model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), resolution)
    model.vis.global_.offheight = max(int(model.vis.global_.offheight), resolution)
    renderer = mujoco.Renderer(model, resolution, resolution)
    renderer.enable_segmentation_rendering()
    cams = [free_camera(CAMERA_BANK[n]) for n in names]
    seen = np.zeros(model.ngeom, bool)
    rng = np.random.default_rng(seed)
    states = 0

    def probe(action, obs, terminated, truncated, info) -> None:
        nonlocal states
        if (info["step"] - 1) % every == 0:  # after steps 0, every, 2 every, ... of the episode
            for cam in cams:
                renderer.update_scene(data, camera=cam)
                seg = renderer.render()
                ids = seg[..., 0][seg[..., 1] == mujoco.mjtObj.mjOBJ_GEOM]
                seen[np.unique(ids)] = True
            states += 1

    try:
        for ep in range(episodes):
            run_episode(env, lambda obs: rng.uniform(-1, 1, 4), seed=seed + ep,
                        options={"difficulty": (ep % 11) / 10}, on_step=probe)
            if progress:
                print(f"\rculling probe: episode {ep + 1}/{episodes}, {int((~seen).sum())} geoms unseen", end="", flush=True)
    finally:
        renderer.close()
        env.close()
    if progress:
        print()
    labels = tuple(geom_label(model, int(g)) for g in np.flatnonzero(~seen))
    return CullingProbe(labels, tuple(names), int(resolution), states, int(seed))


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Find the geoms no bank camera sees and write the culling list.")
    p.add_argument("--episodes", type=int, default=60)
    p.add_argument("--resolution", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(Path(__file__).parent / "assets" / CULLED_GEOMS_FILE))
    a = p.parse_args(argv)
    probe = find_invisible_geoms(a.episodes, a.resolution, seed=a.seed, progress=True)
    Path(a.out).write_text(json.dumps(asdict(probe), indent=1) + "\n")
    print(f"{len(probe.geoms)} geoms never visible over {probe.states} states x {len(probe.views)} views "
          f"at {probe.resolution} px: {', '.join(probe.geoms)} -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

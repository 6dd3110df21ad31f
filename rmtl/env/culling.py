"""Exact culling: geoms that no camera of the bank ever shows are left out of rendering.

:func:`find_invisible_geoms` renders segmentation images (geom id per pixel) of every
bank view over many states (random actions from every curriculum difficulty, so the arm
reaches all over the workspace) and returns the geoms that never own a pixel. The list
the renderer uses ships as data (``rmtl/env/assets/culled_geoms.json``), written by
``python -m rmtl.env.culling`` with the probe's settings; it holds for frames up to the
probe's resolution (a geom can show up as a sliver at a larger size), so the renderer
culls nothing above it. Culling only ever applies without shadows and reflections: an
unseen geom can still cast a shadow or appear in a reflection.

Frames with and without culling are byte-identical (``tests/test_env_culling.py``);
culled geoms are moved to geom group :data:`CULL_GROUP`, which the renderer switches off.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from rmtl.errors import ConfigError

CULL_GROUP = 5
"""MuJoCo geom group (0-5) culled geoms are moved to; the bank renderer turns it off."""

CULLED_GEOMS_FILE = "culled_geoms.json"


@dataclass(frozen=True)
class CullingProbe:
    """How the shipped culling list was found (kept in the file beside it)."""

    geoms: tuple[str, ...]
    """Names of the geoms no view showed (body name for unnamed geoms: ``body:<name>#<k>``)."""
    views: tuple[str, ...]
    resolution: int
    """Segmentation resolution (px); the list holds for frames up to this size."""
    states: int
    """States probed (each rendered from every view)."""
    seed: int


def geom_label(model, geom: int) -> str:
    """A stable label of a geom: its name, else ``body:<body name>#<index within the body>``."""
    import mujoco

    name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, geom)
    if name:
        return name
    body = int(model.geom_bodyid[geom])
    same = np.flatnonzero(model.geom_bodyid == body)
    return f"body:{mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body)}#{int(np.searchsorted(same, geom))}"


def geom_ids(model, labels: Sequence[str]) -> np.ndarray:
    """Geom ids of labels made by :func:`geom_label`; unknown labels are a ConfigError."""
    table = {geom_label(model, g): g for g in range(model.ngeom)}
    missing = [lab for lab in labels if lab not in table]
    if missing:
        raise ConfigError(f"culling list names geoms this model lacks ({', '.join(missing)}); "
                          "regenerate it with `python -m rmtl.env.culling`")
    return np.asarray([table[lab] for lab in labels], dtype=np.int64)


def find_invisible_geoms(episodes: int = 60, resolution: int = 224, every: int = 2, seed: int = 0,
                         views: Sequence[str] | None = None, progress: bool = False) -> CullingProbe:
    """Geoms never visible in any view over ``episodes`` random-action episodes.

    Difficulties cycle through [0, 1] so every curriculum stage's start poses are
    probed; every ``every``-th step of each episode is rendered from all views.
    Geoms already invisible (alpha 0, e.g. hidden markers) count as invisible too.
    """
    import mujoco

    from rmtl.env.cameras import CAMERA_BANK, _preload_triton, free_camera, resolve_views
    from rmtl.env.fetch_lift import FetchPickAndLiftEnv

    names = resolve_views(views)
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
    try:
        for ep in range(episodes):
            env.reset(seed=seed + ep, options={"difficulty": (ep % 11) / 10})
            for t in range(env.config.max_episode_steps):
                _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, 4))
                if t % every == 0:
                    for cam in cams:
                        renderer.update_scene(data, camera=cam)
                        seg = renderer.render()
                        ids = seg[..., 0][seg[..., 1] == mujoco.mjtObj.mjOBJ_GEOM]
                        seen[np.unique(ids)] = True
                    states += 1
                if term or trunc:
                    break
            if progress:
                print(f"\rculling probe: episode {ep + 1}/{episodes}, {int((~seen).sum())} geoms unseen", end="", flush=True)
    finally:
        renderer.close()
        env.close()
    if progress:
        print()
    labels = tuple(geom_label(model, int(g)) for g in np.flatnonzero(~seen))
    return CullingProbe(labels, tuple(names), int(resolution), states, int(seed))


@lru_cache(maxsize=1)
def shipped_culling() -> CullingProbe:
    """The culling list shipped with the package."""
    text = resources.files("rmtl.env").joinpath("assets", CULLED_GEOMS_FILE).read_text()
    d = json.loads(text)
    return CullingProbe(tuple(d["geoms"]), tuple(d["views"]), int(d["resolution"]), int(d["states"]), int(d["seed"]))


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

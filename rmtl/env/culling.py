"""Exact culling: geoms that no camera of the bank ever shows are left out of rendering.

:func:`rmtl.tasks.fetch_lift.culling_probe.find_invisible_geoms` renders segmentation images (geom id per pixel) of every
bank view over many states (random actions from every curriculum difficulty, so the arm
reaches all over the workspace) and returns the geoms that never own a pixel. The list
the renderer uses ships as data (``rmtl/env/assets/culled_geoms.json``), written by
``python -m rmtl.tasks.fetch_lift.culling_probe`` with the probe's settings; it holds for frames up to the
probe's resolution (a geom can show up as a sliver at a larger size), so the renderer
culls nothing above it. Culling only ever applies without shadows and reflections: an
unseen geom can still cast a shadow or appear in a reflection.

Frames with and without culling are byte-identical (``tests/test_env_render_fast.py``);
culled geoms are moved to geom group :data:`CULL_GROUP`, which the renderer switches off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from collections.abc import Sequence

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
                          "regenerate it with `python -m rmtl.tasks.fetch_lift.culling_probe`")
    return np.asarray([table[lab] for lab in labels], dtype=np.int64)


@lru_cache(maxsize=1)
def shipped_culling() -> CullingProbe:
    """The culling list shipped with the package."""
    text = resources.files("rmtl.env").joinpath("assets", CULLED_GEOMS_FILE).read_text()
    d = json.loads(text)
    return CullingProbe(tuple(d["geoms"]), tuple(d["views"]), int(d["resolution"]), int(d["states"]), int(d["seed"]))

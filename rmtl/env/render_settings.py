"""Render settings that decide the pixels of a frame beyond the state, and the renderer id
that stores and state caches record so frames of two renderers never mix."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from rmtl.config import Config

DEFAULT_MESH_REDUCTION = 0.75
"""Default decimation of the reward renderer's meshes (measured: results/bench/renderer_fidelity.json)."""

FULL_MSAA_SAMPLES = 4
"""MuJoCo's default offscreen multisampling (the renderer every store before render ids used)."""


class RenderSettings(Config):
    """How the reward renderer draws the scene (see docs/env.md, "Rendering speed")."""

    cull_invisible: bool = True
    """Leave out the geoms no bank camera sees (rmtl.env.culling). Exact: frames are byte-identical."""
    mesh_reduction: float = Field(DEFAULT_MESH_REDUCTION, ge=0, lt=1)
    """Fraction of mesh faces removed for rendering (rmtl.env.mesh_lod, fast-simplification); 0: full meshes.
    The default 0.75 renders six views ~2.5x faster and keeps the shipped model's reward within
    the tolerances of bench/renderer_fidelity.py (docs/env.md, "Rendering speed")."""
    msaa_samples: int = Field(FULL_MSAA_SAMPLES, ge=0, le=16)
    """Offscreen multisampling (anti-aliasing) samples; 0 renders aliased edges, ~2x faster on CPU."""
    skybox: bool = True
    """Draw MuJoCo's skybox behind the scene. Off, the background is the clear colour and six 64 px
    views render ~18% faster on CPU (results/bench/run_account.md): a renderer for a new model
    trained on it, never for a model trained with the skybox (the pixels differ; the id records it)."""

    def profile(self, visual_domain: bool, shadows: bool, reflections: bool) -> dict[str, Any]:
        """The settings with their renderer id. The id hashes what changes pixels. Culling is
        exact for the full meshes (the probe's), so there it is recorded but left out of the
        id; decimated meshes can show a few pixels of a culled geom, so with
        ``mesh_reduction`` > 0 the culled list is part of the renderer."""
        from rmtl.env.culling import shipped_culling

        pixels = {"visual_domain": bool(visual_domain), "shadows": bool(shadows), "reflections": bool(reflections),
                  "mesh_reduction": round(float(self.mesh_reduction), 6), "msaa_samples": int(self.msaa_samples)}
        if not self.skybox:  # recorded only when off, so the ids of every earlier renderer stand
            pixels["skybox"] = False
        culling = shipped_culling()
        culled = list(culling.geoms) if self.cull_invisible and not (shadows or reflections) else []
        if self.mesh_reduction > 0:
            pixels["culled_geoms"] = culled
        return {**pixels, "culled_geoms": culled, "cull_max_resolution": culling.resolution,
                "renderer_id": renderer_id(pixels)}


def renderer_id(pixels: dict[str, Any]) -> str:
    """``mj-`` + ten hex digits of the pixel-deciding settings."""
    return "mj-" + hashlib.sha256(json.dumps(pixels, sort_keys=True).encode()).hexdigest()[:10]


RENDERER_V1_ID = renderer_id({"visual_domain": True, "shadows": False, "reflections": False,
                                  "mesh_reduction": 0.0, "msaa_samples": FULL_MSAA_SAMPLES})
"""Renderer v1, the one every store without a recorded renderer id was rendered with: paper domain, no
shadows, full meshes, 4x MSAA."""

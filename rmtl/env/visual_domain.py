"""The paper's visual domain (Fig. 4): saturated red cube, wooden table, neutral grey
floor and background, contrast lighting.

Applied by editing the compiled MuJoCo model in place, before any renderer is created
(textures are uploaded to the GL context when a renderer is made). Dynamics are not
touched: only materials, textures and lights change.
"""

from __future__ import annotations

import numpy as np

CUBE_RGBA = (0.85, 0.04, 0.04, 1.0)
TABLE_RGBA = (1.0, 1.0, 1.0, 1.0)  # white tint: the wood texture carries the colour
FLOOR_RGBA = (0.45, 0.45, 0.45, 1.0)
SKY_RGB = (150, 150, 150)
WOOD_DARK = np.array([110, 66, 33], dtype=np.float64)
WOOD_LIGHT = np.array([170, 112, 62], dtype=np.float64)


def _wood_texture(height: int, width: int, seed: int = 7) -> np.ndarray:
    """Deterministic wood-grain RGB texture uint8 [H, W, 3] (rings along one axis)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    warp = 6.0 * np.sin(x / 37.0) + 3.0 * np.sin(x / 11.0 + 1.3)
    rings = 0.5 + 0.5 * np.sin((y + warp) / 4.5 + rng.uniform(0, 6.28))
    fine = 0.15 * np.sin((y + 0.5 * warp) * 1.7)
    t = np.clip(rings ** 2.0 + fine, 0, 1)[..., None]
    img = WOOD_DARK * (1 - t) + WOOD_LIGHT * t
    return np.clip(img, 0, 255).astype(np.uint8)


def _material(model, name: str) -> int:
    import mujoco

    mid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MATERIAL, name)
    if mid < 0:
        raise RuntimeError(f"Fetch model has no material {name!r}; gymnasium-robotics changed its assets")
    return mid


def hide_markers(model) -> None:
    """Hide what is not part of the scene: Fetch's target sphere (pick-and-lift has no
    goal to show) and the green axis bars drawn at the mocap target."""
    import mujoco

    sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "target0")
    if sid >= 0:
        model.site_rgba[sid, 3] = 0.0
    mocap = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "robot0:mocap")
    if mocap >= 0:
        model.geom_rgba[model.geom_bodyid == mocap, 3] = 0.0


def apply_visual_domain(model) -> None:
    """Apply the paper's visual domain to a compiled Fetch pick-and-place model."""
    import mujoco

    cube = _material(model, "block_mat")
    model.mat_rgba[cube] = CUBE_RGBA
    model.mat_specular[cube] = 0.3
    model.mat_shininess[cube] = 0.3

    floor = _material(model, "floor_mat")
    model.mat_rgba[floor] = FLOOR_RGBA

    # Fetch ships one 2-D texture ("texture_block") that no material uses; it becomes the
    # wood of the table, so no new asset has to be compiled into the model.
    table = _material(model, "table_mat")
    tex = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_TEXTURE, "texture_block")
    if tex >= 0 and model.tex_nchannel[tex] == 3:
        h, w = int(model.tex_height[tex]), int(model.tex_width[tex])
        adr = int(model.tex_adr[tex])
        model.tex_data[adr : adr + h * w * 3] = _wood_texture(h, w).reshape(-1)
        model.mat_texid[table, int(mujoco.mjtTextureRole.mjTEXROLE_RGB)] = tex
        model.mat_rgba[table] = TABLE_RGBA
    else:  # fall back to a flat wood colour
        model.mat_rgba[table] = (*(WOOD_LIGHT / 255.0), 1.0)

    # Skybox (the background behind the scene): flat neutral grey.
    for t in range(model.ntex):
        if model.tex_type[t] == mujoco.mjtTexture.mjTEXTURE_SKYBOX:
            adr, n = int(model.tex_adr[t]), int(model.tex_height[t] * model.tex_width[t])
            c = int(model.tex_nchannel[t])
            px = model.tex_data[adr : adr + n * c].reshape(n, c)
            px[:, :3] = SKY_RGB

    # Contrast lighting: a brighter key light that casts shadows, dimmer ambient fill.
    model.light_castshadow[:] = True
    model.light_diffuse[:] = (0.9, 0.9, 0.9)
    model.light_ambient[:] = (0.25, 0.25, 0.25)
    model.light_specular[:] = (0.3, 0.3, 0.3)
    model.vis.headlight.ambient[:] = (0.15, 0.15, 0.15)
    model.vis.headlight.diffuse[:] = (0.35, 0.35, 0.35)

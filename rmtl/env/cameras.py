"""A camera bank (named MuJoCo free cameras) rendered offscreen, and the view-name and
resolution config types. The bank itself is a task's: pick-and-lift's six cameras of the
paper (App. A) are in ``rmtl.tasks.fetch_lift.cameras``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from collections.abc import Iterable, Mapping, Sequence

from pydantic import AfterValidator, BeforeValidator

import numpy as np

from rmtl.errors import ConfigError

MIN_RESOLUTION = 64
MAX_RESOLUTION = 720


@dataclass(frozen=True)
class CameraSpec:
    """A MuJoCo free camera: degrees, degrees, metres, and a lookat point."""

    name: str
    azimuth: float
    elevation: float
    distance: float
    lookat: tuple[float, float, float]


def resolve_views(views: Iterable[str] | str | None, bank: Sequence[str]) -> tuple[str, ...]:
    """Validate view names against a bank's (None or 'all' means the whole bank), keeping bank order."""
    bank = tuple(bank)
    names = _parse_views(views)
    if names == ("all",):
        return bank
    unknown = [v for v in names if v not in bank]
    if unknown:
        raise ConfigError(f"unknown camera view {unknown[0]!r}; choose from {', '.join(bank)}")
    return tuple(v for v in bank if v in names)


def _parse_views(views: Iterable[str] | str | None) -> tuple[str, ...]:
    """View names as given (a comma list accepted; None is 'all'), non-empty and without repeats."""
    if views is None or views == "all":
        return ("all",)
    if isinstance(views, str):
        views = [v.strip() for v in views.split(",") if v.strip()]
    names = tuple(views)
    if not names:
        raise ConfigError("no camera views given; name them, or 'all' for every camera of the bank")
    if any(not isinstance(v, str) for v in names):
        raise ConfigError(f"camera views are names, got {list(names)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"camera views repeat: {list(names)}")
    return names


def check_resolution(resolution: int) -> int:
    """Validate a square frame size in pixels."""
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)):
        raise ConfigError(f"resolution must be an integer number of pixels, got {resolution!r}")
    if not MIN_RESOLUTION <= int(resolution) <= MAX_RESOLUTION:
        raise ConfigError(
            f"resolution {resolution} is out of range; use a square size from {MIN_RESOLUTION} to {MAX_RESOLUTION} pixels"
        )
    return int(resolution)


def _preload_triton() -> None:
    """Import Triton (shipped with torch) before the first GL context exists.

    Triton bundles its own LLVM; loaded *after* Mesa's llvmpipe (the CPU EGL driver) it
    crashes the process (segfault when torchvision/open_clip is imported after a render).
    Loaded first, both coexist; it costs ~0.3 s once per process.
    """
    try:
        import triton  # noqa: F401
    except ImportError:
        pass


def _view_field(v) -> tuple[str, ...]:
    try:
        return _parse_views(v)
    except ConfigError as err:  # pydantic reports ValueError as a field error
        raise ValueError(str(err)) from None


def _resolution_field(v: int) -> int:
    try:
        return check_resolution(v)
    except ConfigError as err:
        raise ValueError(str(err)) from None


ViewNames = Annotated[tuple[str, ...], BeforeValidator(_view_field)]
"""Config field type: camera view names ('all' or a comma list accepted), non-empty and without
repeats; the config that knows its bank checks them against it (:func:`resolve_views`)."""
Resolution = Annotated[int, AfterValidator(_resolution_field)]
"""Config field type: a validated square frame size in pixels."""


def free_camera(spec: CameraSpec):
    """A MuJoCo free camera placed as ``spec`` says."""
    import mujoco

    cam = mujoco.MjvCamera()
    cam.type = mujoco.mjtCamera.mjCAMERA_FREE
    cam.azimuth, cam.elevation, cam.distance = spec.azimuth, spec.elevation, spec.distance
    cam.lookat[:] = spec.lookat
    return cam


class CameraBankRenderer:
    """Renders the named free cameras of a bank (name -> CameraSpec) of one MuJoCo model to uint8 [V, H, W, 3].

    One ``mujoco.Renderer`` per resolution is created lazily and reused; the model's
    offscreen buffer is enlarged first when a frame is larger than it (MuJoCo's default
    offscreen buffer is 640x480).

    ``culled``: geom ids left out of rendering (moved to the culled geom group, which
    every view switches off; see rmtl.env.culling), applied only without shadows and
    reflections and at resolutions up to ``cull_max_resolution``. ``mesh_reduction`` > 0
    renders a copy of the model with decimated meshes that follows the simulation's
    state (rmtl.env.mesh_lod); 0 renders the simulation's own model.
    """

    def __init__(self, model, data, bank: Mapping[str, CameraSpec], shadows: bool = True, reflections: bool = True,
                 culled: Sequence[int] = (), cull_max_resolution: int = MAX_RESOLUTION,
                 mesh_reduction: float = 0.0, skybox: bool = True):
        import mujoco

        from rmtl.env.culling import CULL_GROUP

        self._mujoco = mujoco
        self.shadows = shadows
        self.reflections = reflections
        self.skybox = bool(skybox)
        self._lod = None
        if mesh_reduction > 0:
            from rmtl.env.mesh_lod import RenderModel

            self._lod = RenderModel(model, data, mesh_reduction)
            model, data = self._lod.model, self._lod.data
        self.model = model
        self.data = data
        culled = [int(g) for g in culled] if not (shadows or reflections) else []
        if culled and np.any(np.delete(np.asarray(model.geom_group), culled) == CULL_GROUP):
            culled = []  # the model uses the group itself: culling would hide its geoms too
        self.culled = tuple(culled)
        self.cull_max_resolution = int(cull_max_resolution)
        # MuJoCo's default option shows groups 0-2 only; the culled geoms' group is shown
        # again above cull_max_resolution, and switched off up to it.
        self._all_groups = mujoco.MjvOption()
        self._culling = mujoco.MjvOption()
        if culled:
            model.geom_group[culled] = CULL_GROUP  # only the visualiser reads geom groups
            self._all_groups.geomgroup[CULL_GROUP] = 1
            self._culling.geomgroup[CULL_GROUP] = 0
        self._renderers: dict[int, object] = {}
        self._cameras: dict[str, object] = {name: free_camera(spec) for name, spec in bank.items()}

    def _renderer(self, resolution: int):
        r = self._renderers.get(resolution)
        if r is None:
            _preload_triton()
            vis = self.model.vis.global_
            vis.offwidth = max(int(vis.offwidth), resolution)
            vis.offheight = max(int(vis.offheight), resolution)
            r = self._mujoco.Renderer(self.model, height=resolution, width=resolution)
            flags = r.scene.flags
            flags[self._mujoco.mjtRndFlag.mjRND_SHADOW] = self.shadows
            flags[self._mujoco.mjtRndFlag.mjRND_REFLECTION] = self.reflections
            flags[self._mujoco.mjtRndFlag.mjRND_SKYBOX] = self.skybox
            self._renderers[resolution] = r
        return r

    def render(self, views: Sequence[str], resolution: int, out: np.ndarray | None = None) -> np.ndarray:
        """Render ``views`` (validated names) at ``resolution``; returns uint8 [V, H, W, 3]."""
        r = self._renderer(resolution)
        if out is None:
            out = np.empty((len(views), resolution, resolution, 3), dtype=np.uint8)
        data = self._lod.sync() if self._lod is not None else self.data
        option = self._culling if self.culled and resolution <= self.cull_max_resolution else self._all_groups
        for i, name in enumerate(views):
            r.update_scene(data, camera=self._cameras[name], scene_option=option)
            r.render(out=out[i])
        return out

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()

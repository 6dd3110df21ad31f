"""Lighter meshes for the reward renderer: a copy of the MuJoCo model whose large meshes
are decimated with ``fast-simplification`` (quadric edge collapse).

Only the render copy changes: physics keeps the original model (collision uses its own
convex hulls), and the renderer copies the simulation state into the copy before each
frame (:class:`RenderModel`). The decimated mesh is written into the mesh's own slots of
the model arrays and its face count lowered; vertex normals are recomputed (area
weighted) because the originals belong to vertices that no longer exist.
"""

from __future__ import annotations

import copy

import numpy as np

from rmtl.errors import ConfigError

MIN_FACES = 200
"""Meshes with fewer faces are left as they are (decimating them saves nothing)."""


def simplify_meshes(model, reduction: float, min_faces: int = MIN_FACES):
    """A copy of ``model`` with every mesh of >= ``min_faces`` faces reduced by ``reduction``
    (the fraction of faces removed, 0 <= reduction < 1)."""
    if not 0.0 <= reduction < 1.0:
        raise ConfigError(f"mesh_reduction must be in [0, 1), got {reduction}")
    import fast_simplification

    out = copy.deepcopy(model)
    if reduction == 0.0:
        return out
    for i in range(out.nmesh):
        va, vn = int(out.mesh_vertadr[i]), int(out.mesh_vertnum[i])
        fa, fn = int(out.mesh_faceadr[i]), int(out.mesh_facenum[i])
        na, nn = int(out.mesh_normaladr[i]), int(out.mesh_normalnum[i])
        if fn < min_faces or out.mesh_texcoordnum[i] > 0:
            continue  # textured meshes would need their texture coordinates remapped too
        pts = out.mesh_vert[va:va + vn].astype(np.float64)
        faces = out.mesh_face[fa:fa + fn].astype(np.int64)
        p2, f2 = fast_simplification.simplify(pts, faces, target_reduction=float(reduction))
        if len(f2) == 0 or len(p2) > min(vn, nn):
            continue
        out.mesh_vert[va:va + len(p2)] = p2
        out.mesh_face[fa:fa + len(f2)] = f2
        out.mesh_normal[na:na + len(p2)] = _vertex_normals(p2, f2)
        out.mesh_facenormal[fa:fa + len(f2)] = f2
        out.mesh_facenum[i] = len(f2)
        out.mesh_vertnum[i] = len(p2)
    return out


def _vertex_normals(points: np.ndarray, faces: np.ndarray) -> np.ndarray:
    tri = points[faces]
    face_n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])  # length = 2 x area: area weighting
    n = np.zeros_like(points)
    for k in range(3):
        np.add.at(n, faces[:, k], face_n)
    return n / np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-12)


def mesh_faces(model) -> int:
    """Faces over all meshes of a model (after simplification, the reduced count)."""
    return int(np.asarray(model.mesh_facenum).sum())


class RenderModel:
    """A render-only copy of a model that follows the simulation's state.

    :meth:`sync` copies qpos and the mocap poses from the simulation's data and runs
    forward kinematics and the camera/light update: exactly what the visualiser reads.
    """

    def __init__(self, model, data, reduction: float):
        import mujoco

        self._mujoco = mujoco
        self.source_data = data
        self.model = simplify_meshes(model, reduction)
        self.data = mujoco.MjData(self.model)

    def sync(self):
        src, dst = self.source_data, self.data
        dst.qpos[:] = src.qpos
        dst.mocap_pos[:] = src.mocap_pos
        dst.mocap_quat[:] = src.mocap_quat
        self._mujoco.mj_kinematics(self.model, dst)
        self._mujoco.mj_camlight(self.model, dst)
        return dst

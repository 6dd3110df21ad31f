"""The fast render path: exact culling, lighter meshes, renderer ids, bf16 selection."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.errors import ConfigError

ALL_VIEWS = ("wide_view", "front", "front_side", "isometric", "side", "close_up")


def _states(env, episodes: int, seed: int):
    """Seeded states over every difficulty: random actions and the scripted expert."""
    from rmtl.tasks.fetch_lift.expert import ScriptedExpert

    rng = np.random.default_rng(seed)
    for ep in range(episodes):
        env.reset(seed=seed + ep, options={"difficulty": (ep % 5) / 4})
        expert = ScriptedExpert() if ep % 2 else None
        for t in range(env.config.max_episode_steps):
            if expert is not None:
                action = expert(env.state)
            else:
                action = rng.uniform(-1, 1, 4)
            _, _, term, trunc, _ = env.step(action)
            if t % 6 == 0:
                yield ep, t
            if term or trunc:
                break


def test_culling_is_byte_identical_over_many_states():
    from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv

    full = FetchPickAndLiftEnv(render={"cull_invisible": False, "mesh_reduction": 0.0})
    culled = FetchPickAndLiftEnv(render={"cull_invisible": True, "mesh_reduction": 0.0})
    assert culled._cameras is None and len(culled.config.render_profile()["culled_geoms"]) >= 2
    n = 0
    for (_, _), _ in zip(_states(full, 12, 11), _states(culled, 12, 11)):
        np.testing.assert_array_equal(full.state, culled.state)
        a, b = full.render_views(ALL_VIEWS, 96), culled.render_views(ALL_VIEWS, 96)
        assert np.array_equal(a, b), f"culled frames differ at state {n}"
        n += 1
    assert n >= 30
    assert culled._cameras.culled, "culling was not applied"
    full.close()
    culled.close()


def test_shipped_culling_list_names_geoms_no_view_sees():
    """Re-probe a few episodes: every culled geom still owns no pixel (at 96 px)."""
    from rmtl.env.culling import shipped_culling
    from rmtl.tasks.fetch_lift.culling_probe import find_invisible_geoms

    probe = find_invisible_geoms(episodes=3, resolution=96, every=5, seed=123)
    assert set(shipped_culling().geoms) <= set(probe.geoms)
    assert "robot0:estop_link" in shipped_culling().geoms


def test_lighter_meshes_reduce_faces_and_stay_close():
    from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv
    from rmtl.env.mesh_lod import mesh_faces

    full = FetchPickAndLiftEnv(render={"mesh_reduction": 0.0})
    lite = FetchPickAndLiftEnv(render={"mesh_reduction": 0.75})
    full.reset(seed=4)
    lite.reset(seed=4)
    a, b = full.render_views(ALL_VIEWS, 96), lite.render_views(ALL_VIEWS, 96)
    assert mesh_faces(lite._cameras.model) < 0.4 * mesh_faces(full.model)
    assert mesh_faces(full._cameras.model) == mesh_faces(full.model)  # physics model untouched
    assert not np.array_equal(a, b)
    assert np.abs(a.astype(int) - b).mean() < 3.0  # same scene, small silhouette changes
    # the render copy follows the simulation
    lite.step(np.array([1.0, 0, 0, 0]))
    assert not np.array_equal(lite.render_views(ALL_VIEWS, 96), b)
    full.close()
    lite.close()


def test_renderer_id_changes_with_pixels_not_with_culling():
    from rmtl.tasks.fetch_lift.env import EnvConfig
    from rmtl.env.render_settings import RENDERER_V1_ID

    full = {"mesh_reduction": 0.0}
    base = EnvConfig(render=full).render_profile()
    assert base["renderer_id"] == RENDERER_V1_ID
    assert EnvConfig(render={**full, "cull_invisible": False}).render_profile()["renderer_id"] == base["renderer_id"]
    others = {EnvConfig().render_profile()["renderer_id"],
              EnvConfig(render={**full, "msaa_samples": 0}).render_profile()["renderer_id"],
              EnvConfig(shadows=True).render_profile()["renderer_id"]}
    assert base["renderer_id"] not in others and len(others) == 3
    assert EnvConfig(shadows=True).render_profile()["culled_geoms"] == []  # unseen geoms still cast shadows
    # decimated meshes can poke out where the full ones never show: there culling is part of the renderer
    assert (EnvConfig(render={"cull_invisible": False}).render_profile()["renderer_id"]
            != EnvConfig().render_profile()["renderer_id"])
    with pytest.raises(ConfigError):
        EnvConfig.make(render={"mesh_reduction": 1.0})


def test_store_records_renderer_and_refuses_to_mix(tmp_path):
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig
    from rmtl.errors import StoreError
    from storage.dataset import DatasetStore

    path = tmp_path / "s.zarr"
    cfg = RolloutConfig.make(episodes=1, views=["wide_view"], resolution=64, render={"msaa_samples": 0})
    render_to_store(path, cfg, progress=False)
    with DatasetStore.open(path) as st:
        assert st.renderer_id == cfg.render.profile(True, False, False)["renderer_id"]
        assert st.info["renderer"]["msaa_samples"] == 0
    with pytest.raises(StoreError, match="renderer"):
        render_to_store(path, cfg.replace(episodes=2, render={"msaa_samples": 4}), progress=False)


def test_precision_selection(monkeypatch):
    import torch

    from rmtl.vlm import device

    monkeypatch.setattr(device, "cpu_has_bf16", lambda: True)
    assert device.select_precision(torch.device("cpu")) == "bf16"
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: False)
    assert device.select_precision(torch.device("cpu")) == "fp32"
    assert device.select_precision(torch.device("cpu"), "fp32") == "fp32"  # overridable
    assert device.select_precision(torch.device("cuda")) == "amp_bf16"


def test_precision_is_recorded_with_embeddings(tmp_path, monkeypatch):
    import torch

    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig
    from rmtl.errors import StoreError
    from rmtl.vlm import load_vlm
    from storage.dataset import DatasetStore

    path = tmp_path / "p.zarr"
    render_to_store(path, RolloutConfig.make(episodes=2, views=["wide_view"], resolution=64), progress=False)
    torch.manual_seed(0)
    vlm = load_vlm("rmtl-fetch-tiny@random", precision="fp32")
    with DatasetStore.open(path, "a") as st:  # embed the first rows only, as a killed run would
        frames = st.read(slice(0, 10), fields=["frames"])["frames"]
        st.add_embeddings(vlm.model_id, 0, vlm.encode_images(frames[:, 0])[:, None],
                          meta={"precision": "fp32"})
    other = load_vlm("rmtl-fetch-tiny@random", precision="bf16")
    other.spec = vlm.spec  # same id, other precision
    with pytest.raises(StoreError, match="precision"):
        embed_store(path, other, progress=False)
    embed_store(path, vlm, progress=False)
    with DatasetStore.open(path) as st:
        assert st.embedding_info(vlm.model_id)["meta"]["precision"] == "fp32"


def test_culling_stops_above_the_probe_resolution(small_env):
    """Above the resolution the culling list was probed at, every geom renders again."""
    import mujoco

    from rmtl.env.cameras import CameraBankRenderer
    from rmtl.tasks.fetch_lift.cameras import CAMERA_BANK

    small_env.reset(seed=0, options={"difficulty": 0.0})
    model, data = small_env.model, small_env.data
    cube = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "object0")
    group = int(model.geom_group[cube])
    try:
        plain = CameraBankRenderer(model, data, CAMERA_BANK, shadows=False, reflections=False)
        full64, full96 = plain.render(["close_up"], 64), plain.render(["close_up"], 96)  # before culling moves the cube's group
        culled = CameraBankRenderer(model, data, CAMERA_BANK, shadows=False, reflections=False, culled=[cube], cull_max_resolution=64)
        assert not np.array_equal(full64, culled.render(["close_up"], 64))  # the cube is culled up to 64 px
        np.testing.assert_array_equal(full96, culled.render(["close_up"], 96))
    finally:
        model.geom_group[cube] = group  # the session env's model is shared
        plain.close()
        culled.close()


def test_the_skybox_off_is_another_renderer_and_the_default_ids_stand():
    """Turning the skybox off changes pixels, so it changes the renderer id; the default's id,
    and so every store rendered before the option, stays as it was."""
    from rmtl.env.render_settings import RenderSettings
    from rmtl.tasks.fetch_lift.env import EnvConfig, FetchPickAndLiftEnv

    on = EnvConfig(render={"msaa_samples": 0, "mesh_reduction": 0.9})
    off = EnvConfig(render={"msaa_samples": 0, "mesh_reduction": 0.9, "skybox": False})
    assert on.render_profile()["renderer_id"] == "mj-005e7c3029"  # the r5-r7 models' renderer, as stored
    assert "skybox" not in RenderSettings().profile(True, False, False)
    assert off.render_profile()["renderer_id"] != on.render_profile()["renderer_id"]
    frames = []
    for cfg in (on, off):
        env = FetchPickAndLiftEnv(cfg)
        try:
            env.reset(seed=4)
            frames.append(env.render_views(["wide_view"], 64))
        finally:
            env.close()
    assert not np.array_equal(frames[0], frames[1])

import numpy as np
import pytest

from rmtl.tasks.fetch_lift.env import EnvConfig, FetchPickAndLiftEnv
from rmtl.env.check import random_policy, success_rate
from rmtl.errors import ConfigError
from rmtl.tasks.fetch_lift.phases import rule_phase
from rmtl.tasks.fetch_lift.expert import expert_policy


def run_episode(env, policy, seed, difficulty):
    obs, info = env.reset(seed=seed, options={"difficulty": difficulty})
    infos, rewards, flags = [info], [], []
    done = False
    while not done:
        obs, r, term, trunc, info = env.step(policy(obs))
        infos.append(info)
        rewards.append(r)
        flags.append((term, trunc))
        done = term or trunc
    return infos, rewards, flags


def test_truncates_at_40_steps_without_success(small_env):
    infos, rewards, flags = run_episode(small_env, lambda o: np.zeros(4, np.float32), seed=3, difficulty=1.0)
    assert len(rewards) == 40
    assert flags[-1] == (False, True)
    assert all(f == (False, False) for f in flags[:-1])
    assert sum(rewards) == 0.0


def test_success_terminates_after_two_held_steps_and_pays_once(small_env):
    cfg = small_env.config
    infos, rewards, flags = run_episode(small_env, expert_policy(), seed=5, difficulty=0.0)
    assert flags[-1] == (True, False), "expert at difficulty 0 must succeed"
    assert rewards[-1] == pytest.approx(1.0) and sum(rewards) == pytest.approx(1.0)
    held = [i["gripper_cube_distance"] <= cfg.success_distance and i["lift_height"] >= cfg.success_lift
            for i in infos[1:]]
    first_two = next(t for t in range(1, len(held)) if held[t] and held[t - 1])
    assert first_two == len(rewards) - 1, "terminates exactly on the second consecutive held step"
    assert infos[-1]["is_success"] and not any(i["is_success"] for i in infos[:-1])


def test_info_reports_rule_phase_and_geometry(small_env):
    obs, info = small_env.reset(seed=0, options={"difficulty": 0.0})
    assert info["gripper_cube_distance"] == pytest.approx(small_env.config.easy_height, abs=0.005)
    assert info["phase_rule"] == rule_phase(info["gripper_cube_distance"])
    assert abs(info["lift_height"]) < 1e-3
    assert obs["observation"].shape == (25,)


def test_same_seed_same_frames(small_env):
    small_env.reset(seed=11, options={"difficulty": 0.7})
    a = small_env.render_views()
    small_env.reset(seed=12, options={"difficulty": 0.7})
    b = small_env.render_views()
    small_env.reset(seed=11, options={"difficulty": 0.7})
    c = small_env.render_views()
    assert np.array_equal(a, c)
    assert not np.array_equal(a, b)


def test_difficulty_moves_start_from_easy_pose_to_workspace(small_env):
    d0 = [small_env.reset(seed=s, options={"difficulty": 0.0})[1]["gripper_cube_distance"] for s in range(5)]
    d1 = [small_env.reset(seed=s, options={"difficulty": 1.0})[1]["gripper_cube_distance"] for s in range(5)]
    assert max(d0) < 0.06 and np.mean(d1) > 0.15
    small_env.set_difficulty_range(0.0, 0.0)
    _, info = small_env.reset(seed=1)
    assert info["difficulty"] == 0.0
    small_env.set_difficulty_range(1.0, 1.0)


def test_start_pose_in_workspace_box(small_env):
    cfg = small_env.config
    for s in range(5):
        obs, _ = small_env.reset(seed=s, options={"difficulty": 1.0})
        grip = obs["observation"][:3]
        assert np.all(grip >= np.array(cfg.workspace_low) - 0.03) and np.all(grip <= np.array(cfg.workspace_high) + 0.03)


def test_target_sphere_hidden(small_env):
    import mujoco

    sid = mujoco.mj_name2id(small_env.model, mujoco.mjtObj.mjOBJ_SITE, "target0")
    assert small_env.model.site_rgba[sid, 3] == 0.0


def test_visual_domain_red_cube_and_switch_off():
    on = FetchPickAndLiftEnv(views=("close_up",), resolution=64)
    off = FetchPickAndLiftEnv(views=("close_up",), resolution=64, visual_domain=False)
    on.reset(seed=0, options={"difficulty": 0.0})
    off.reset(seed=0, options={"difficulty": 0.0})
    f_on, f_off = on.render_views()[0].astype(int), off.render_views()[0].astype(int)
    red = lambda f: ((f[..., 0] > 150) & (f[..., 1] < 60) & (f[..., 2] < 60)).sum()  # noqa: E731
    assert red(f_on) > 10, "the cube is saturated red in the visual domain"
    assert red(f_off) < red(f_on) // 4
    on.close()
    off.close()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"views": ("wide_view", "nope")}, "unknown camera view 'nope'"),
        ({"resolution": 0}, "resolution 0 is out of range"),
        ({"resolution": 5000}, "resolution 5000 is out of range"),
        ({"difficulty": 1.5}, "EnvConfig.difficulty"),
    ],
)
def test_bad_config_is_one_line_error(kwargs, match):
    with pytest.raises(ConfigError, match=match) as err:
        EnvConfig.make(**kwargs)
    assert "\n" not in str(err.value)


def test_bad_reset_difficulty_and_render_args(small_env):
    with pytest.raises(ConfigError, match=r"difficulty -0.1 is outside \[0, 1\]"):
        small_env.reset(seed=0, options={"difficulty": -0.1})
    with pytest.raises(ConfigError, match="unknown camera view"):
        small_env.render_views(["top"])
    with pytest.raises(ConfigError, match="out of range"):
        small_env.render_views(resolution=5000)


def test_expert_solves_and_random_does_not(small_env):
    expert = success_rate(small_env, expert_policy(0.0, seed=0), "expert", 20, 1.0, seed=100)
    rand = success_rate(small_env, random_policy(small_env, seed=0), "random", 20, 1.0, seed=100)
    assert expert.rate >= 0.9
    assert rand.rate < 0.05


def test_large_frames_raise_offscreen_buffer(small_env):
    small_env.reset(seed=0)
    frames = small_env.render_views(["front"], resolution=720)
    assert frames.shape == (1, 720, 720, 3)
    assert small_env._cameras.model.vis.global_.offwidth >= 720  # the render model (a decimated copy by default)


@pytest.mark.slow
def test_importing_open_clip_after_rendering_does_not_crash():
    """Triton's LLVM loaded after Mesa's segfaulted render-then-embed processes."""
    import subprocess
    import sys

    code = ("from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv\n"
            "e = FetchPickAndLiftEnv(resolution=64, views=('front',)); e.reset(seed=0); e.render_views()\n"
            "import open_clip\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-500:]


def test_cached_observation_is_bit_identical_to_gymnasium_robotics():
    """The env reads its observation with ids looked up once; Gymnasium-Robotics' own
    _get_obs (names looked up every step) must give exactly the same numbers."""
    import numpy as np

    from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv

    env = FetchPickAndLiftEnv()
    try:
        rng = np.random.default_rng(0)
        for episode in range(3):
            obs, _ = env.reset(seed=episode, options={"difficulty": [0.0, 0.5, 1.0][episode]})
            for _ in range(40):
                ref = env._fetch._get_obs()
                np.testing.assert_array_equal(obs["observation"], ref["observation"].astype(np.float64))
                np.testing.assert_array_equal(obs["achieved_goal"], ref["achieved_goal"])
                obs, *_ = env.step(rng.uniform(-1, 1, 4))
    finally:
        env.close()

"""Scripted degenerate behaviours of pick-and-lift, measured from the state in the real env."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.jobs.rollout import RolloutConfig, plan_episode, policy_label, rollout_episodes
from rmtl.errors import ConfigError
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.behaviours import BEHAVIOURS, describe
from rmtl.tasks.fetch_lift.expert import ScriptedExpert
from rmtl.tasks.fetch_lift.state import (CUBE_POS, CUBE_VELP, FINGER_WIDTHS, GRIPPER_POS, gripper_cube_distance,
                                         lift_height)

FIXTURE = Path(__file__).parent / "fixtures" / "expert_actions.npz"
EPISODES = ((3000, 0.3), (3001, 0.4), (3002, 0.5), (3011, 0.4))
"""(reset seed, difficulty). Starts whose hand, turning down after the reset, leaves the cube
alone (a few starts near the cube get it knocked by the turning hand whatever the policy
does; test_starts_leave_the_cube_alone checks these do not)."""


@pytest.fixture(scope="module")
def env():
    from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv

    e = FetchPickAndLiftEnv(visual_domain=False)
    yield e
    e.close()


_ROLLOUTS: dict[str, list[tuple[np.ndarray, bool]]] = {}


def rollouts(env, name: str) -> list[tuple[np.ndarray, bool]]:
    """(states [T + 1, 25] from the reset on, success) of each of EPISODES, noise-free."""
    if name not in _ROLLOUTS:
        out = []
        for seed, u in EPISODES:
            policy = BEHAVIOURS[name](0.0, seed)
            obs, _ = env.reset(seed=seed, options={"difficulty": u})
            states, success, done = [obs["observation"].copy()], False, False
            while not done:
                obs, _, terminated, truncated, info = env.step(policy(obs))
                states.append(obs["observation"].copy())
                success, done = success or info["is_success"], terminated or truncated
            out.append((np.asarray(states), success))
        _ROLLOUTS[name] = out
    return _ROLLOUTS[name]


def cube_moved(states: np.ndarray) -> np.ndarray:
    """Horizontal cube displacement from its start (m) per step."""
    return np.linalg.norm(states[:, CUBE_POS][:, :2] - states[0, CUBE_POS][:2], axis=1)


def test_expert_actions_unchanged_by_the_shared_controller():
    # Recorded before the expert's controller was shared with the behaviours: 400 synthetic
    # states on every scale its branches switch at, and 120 states of noisy expert episodes.
    rec = np.load(FIXTURE)
    s = rec["states"]
    assert np.array_equal(ScriptedExpert()(s), rec["batch"])
    assert np.array_equal(np.stack([ScriptedExpert()(x) for x in s]), rec["single"])
    assert np.array_equal(ScriptedExpert(noise_std=0.2, seed=7)(s), rec["noisy"])
    assert np.array_equal(ScriptedExpert(hover_height=0.1)(s), rec["hover_0_1"])


def test_registry_names_docs_and_task():
    required = {"hover_0.03", "hover_0.08", "hover_0.15", "sit_at_cube", "push", "grasp_and_drop",
                "closed_jaw_approach", "touch_and_leave", "wander", "expert"}
    assert required <= set(BEHAVIOURS)
    for name in BEHAVIOURS:
        doc = (BEHAVIOURS[name].__doc__ or "").strip()
        assert doc and "\n" not in doc and describe(name) == doc, name
    assert "3 cm above" in describe("hover_0.03")
    task = get_task("fetch_lift")
    assert set(task.behaviours) == set(BEHAVIOURS)
    with pytest.raises(TypeError):
        task.behaviours["mine"] = BEHAVIOURS["push"]  # read-only: the registry is shared


def test_noise_is_seeded_and_behaviours_are_deterministic(env):
    obs, _ = env.reset(seed=3001, options={"difficulty": 0.4})
    states = np.repeat(obs["observation"][None], 5, axis=0)
    for name in ("hover_0.08", "wander", "push"):
        def actions(noise, seed):
            policy = BEHAVIOURS[name](noise, seed)  # noqa: B023 (called in this iteration only)
            return np.stack([policy(s) for s in states])

        assert np.array_equal(actions(0.2, 1), actions(0.2, 1)), name
        assert not np.array_equal(actions(0.2, 1), actions(0.2, 2)), name
        assert not np.array_equal(actions(0.2, 1), actions(0.0, 1)), name
        a = actions(0.5, 3)
        assert a.dtype == np.float32 and a.shape == (5, 4) and np.abs(a).max() <= 1.0
    with pytest.raises(ConfigError, match="noise_std must be >= 0"):
        BEHAVIOURS["push"](-0.1, 0)


def test_starts_leave_the_cube_alone(env):
    for seed, u in EPISODES:
        obs, _ = env.reset(seed=seed, options={"difficulty": u})
        start = obs["observation"][CUBE_POS].copy()
        for _ in range(15):
            obs, *_ = env.step(np.array([0.0, 0.0, 0.0, 1.0]))
        assert np.linalg.norm(obs["observation"][CUBE_POS] - start) < 1e-3, seed


@pytest.mark.parametrize("height", [0.03, 0.08, 0.15])
def test_hover_holds_its_height_and_never_lifts(env, height):
    for states, success in rollouts(env, f"hover_{height}"):
        above = states[:, GRIPPER_POS][:, 2] - states[:, CUBE_POS][:, 2]
        assert np.abs(above[-10:] - height).max() <= 0.015
        assert np.linalg.norm(states[-10:, GRIPPER_POS][:, :2] - states[-10:, CUBE_POS][:, :2], axis=1).max() < 0.015
        assert states[-1, FINGER_WIDTHS].sum() > 0.09  # jaws open
        assert lift_height(states).max() < 0.005 and not success


def test_sit_at_cube_closes_on_it_and_never_lifts(env):
    for states, success in rollouts(env, "sit_at_cube"):
        assert gripper_cube_distance(states[-1]) < 0.03
        assert states[-1, FINGER_WIDTHS].sum() < 0.054  # jaws shut on the 5 cm cube
        assert lift_height(states).max() <= 0.005 and not success


def test_push_slides_the_cube_along_the_table(env):
    for states, success in rollouts(env, "push"):
        assert cube_moved(states)[-1] > 0.10  # pushed ~12 cm (the brief's bar: 3 cm)
        assert lift_height(states).max() < 0.005 and abs(lift_height(states[-1])) < 0.005  # slid, still on the table
        assert not success


def test_grasp_and_drop_lifts_then_lets_go(env):
    for states, success in rollouts(env, "grasp_and_drop"):
        lift = lift_height(states)
        assert lift.max() >= 0.02
        assert np.sum(np.diff((lift >= 0.02).astype(int)) == 1) == 2  # two separate lifts
        assert abs(lift[-1]) < 0.005 and np.linalg.norm(states[-1, CUBE_VELP]) < 0.01  # back on the table, at rest
        assert gripper_cube_distance(states[-1]) > 0.05 and not success


def test_closed_jaw_approach_reaches_the_grasp_bin_with_shut_jaws(env):
    for states, success in rollouts(env, "closed_jaw_approach"):
        widths = states[:, FINGER_WIDTHS].sum(axis=1)
        assert widths[10:].max() < 0.005  # closed (open: 0.10, around the cube: 0.048)
        assert gripper_cube_distance(states).min() <= 0.04
        assert cube_moved(states).max() < 0.01 and lift_height(states).max() < 0.005 and not success


def test_touch_and_leave_touches_then_retreats(env):
    for states, success in rollouts(env, "touch_and_leave"):
        d = gripper_cube_distance(states)
        assert d.min() < 0.03 and d[-1] > 0.15
        assert np.argmin(d) < len(d) - 5  # touched first, then left
        assert lift_height(states).max() < 0.005 and not success


def test_wander_keeps_away_from_the_cube(env):
    near_starts = 0
    for states, success in rollouts(env, "wander"):
        d = gripper_cube_distance(states)
        if d[0] >= 0.10:
            assert d.min() > 0.10
        else:  # started nearer than 10 cm: never closer than that, and gone within 10 steps
            near_starts += 1
            assert d.min() >= d[0] - 0.005 and d[10:].min() > 0.15
        assert np.abs(np.diff(states[1:, GRIPPER_POS], axis=0)).max() < 0.03  # smooth: <= 2 cm/step commanded
        assert cube_moved(states).max() < 1e-3 and not success
    assert near_starts == 1  # EPISODES cover a start 9.5 cm from the cube


def test_wander_plans_only_paths_clear_of_the_cube():
    # Kinematically (the gripper goes where the action says: 5 cm per unit), over 300 steps
    # from 5 seeds, far more waypoints than an episode draws.
    from rmtl.tasks.fetch_lift.expert import ACTION_SCALE

    cube = np.array([1.30, 0.75, 0.425])
    closest = np.inf
    for seed in range(5):
        policy, grip = BEHAVIOURS["wander"](0.0, seed), np.array([1.10, 0.55, 0.60])
        for _ in range(300):
            s = np.zeros(25)
            s[GRIPPER_POS], s[CUBE_POS], s[6:9] = grip, cube, cube - grip
            grip = grip + policy(s)[:3] * ACTION_SCALE
            closest = min(closest, float(np.linalg.norm(grip - cube)))
    assert 0.15 <= closest < 0.25  # it does pass by the cube, never nearer than 15 cm


def test_expert_succeeds(env):
    assert sum(success for _, success in rollouts(env, "expert")) >= len(EPISODES) - 1


def test_rollout_runs_a_behaviour_by_name():
    cfg = RolloutConfig.make(policy="behaviour:sit_at_cube", episodes=1, stages=(2,), noise_std=0.0, seed=3002)
    rows = rollout_episodes(cfg, [0], render=False)
    assert rows["step"][-1] == 40 and not rows["success"].any()
    assert gripper_cube_distance(rows["state"][-1]) < 0.03 and lift_height(rows["state"]).max() <= 0.005
    assert policy_label(cfg, plan_episode(cfg, 0)) == "behaviour sit_at_cube noise 0"


def test_unknown_behaviour_is_one_line_listing_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown behaviour 'hover' of task fetch_lift; known behaviours: "
                                          r"closed_jaw_approach, expert, grasp_and_drop, hover_0.03"):
        RolloutConfig.make(policy="behaviour:hover")


def test_render_and_embed_passes_the_behaviour_spec_to_the_rollout(tmp_path):
    # Refused in preflight, before a model loads or anything renders: the option reached the rollout config.
    r = subprocess.run([sys.executable, "-m", "rmtl.cli", "render-and-embed", "--policy", "behaviour:nope",
                        "--episodes", "1", "--store", str(tmp_path / "s.zarr")],
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "unknown behaviour 'nope'" in lines[0] and "push" in lines[0]

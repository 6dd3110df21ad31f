"""Fetch pick-and-lift: FetchPickAndPlace-v4 with the paper's task definition (App. A).

- 40-step episodes (truncation), success when the gripper is within 0.025 m of the cube
  and the cube is >= 0.02 m above its rest height for 2 consecutive steps; success
  terminates the episode and pays +1.0 on that step. That bonus is the only reward the
  environment itself pays: VLM rewards come from rmtl.reward wrappers.
- The target sphere is hidden; the gripper starts at lerp(easy pose, random workspace
  pose, u) for a difficulty u (reverse curriculum).
- Six-camera bank rendering via :meth:`FetchPickAndLiftEnv.render_views`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
from pydantic import Field, field_validator, model_validator

import rmtl  # noqa: F401  (sets MUJOCO_GL before mujoco is imported)
from rmtl.config import Config
from rmtl.env.cameras import CameraBankRenderer, Resolution, ViewNames, check_resolution
from rmtl.env.render_settings import RenderSettings
from rmtl.env.visual_domain import apply_visual_domain, hide_markers
from rmtl.errors import ConfigError
from rmtl.interrupts import deferred_sigint
from rmtl.tasks.fetch_lift.cameras import CAMERA_BANK, VIEW_NAMES, fetch_views
from rmtl.tasks.fetch_lift.phases import rule_phase

BASE_ENV_ID = "FetchPickAndPlace-v4"


class EnvConfig(Config):
    """Task, start distribution and rendering of the pick-and-lift environment."""

    max_episode_steps: int = Field(40, ge=1)
    """Episode length in steps; the episode is truncated after this many."""
    success_distance: float = Field(0.025, gt=0)
    """Gripper-cube distance (m) at or below which the cube counts as held."""
    success_lift: float = Field(0.02, gt=0)
    """Height (m) above its rest height the cube must reach."""
    success_hold_steps: int = Field(2, ge=1)
    """Consecutive steps the success condition must hold."""
    success_bonus: float = 1.0
    """Reward paid once, on the step that succeeds."""
    workspace_low: tuple[float, float, float] = (1.00, 0.35, 0.43)
    """Lower corner (x, y, z) of the box gripper starts are drawn from (m)."""
    workspace_high: tuple[float, float, float] = (1.60, 1.15, 0.90)
    """Upper corner of that box (m)."""
    easy_height: float = Field(0.05, gt=0)
    """Height (m) above the cube centre of the easy start pose (difficulty 0)."""
    difficulty: float = Field(1.0, ge=0, le=1)
    """Difficulty u used when reset gets none (1 = fully random start)."""
    visual_domain: bool = True
    """Apply the paper's visual domain (red cube, wood table, grey background)."""
    views: ViewNames = VIEW_NAMES
    """Views rendered by render_views() when none are named (names of the bank, kept in bank order)."""
    resolution: Resolution = 224
    """Square frame size (px) rendered when none is given."""
    shadows: bool = False
    """Render shadows: an extra pass that makes six views ~4x slower on CPU (measured in bench/render)."""
    reflections: bool = False
    """Render reflections: an extra pass; off by default for speed like shadows."""
    render: RenderSettings = RenderSettings()
    """Culling, mesh simplification and anti-aliasing of the renderer (rmtl.env.render_settings)."""

    def render_profile(self) -> dict[str, Any]:
        """The renderer's settings and id, as stores and state caches record them."""
        return self.render.profile(self.visual_domain, self.shadows, self.reflections)

    @field_validator("views", mode="after")
    @classmethod
    def _bank_views(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        try:
            return fetch_views(v)
        except ConfigError as err:  # pydantic reports ValueError as a field error
            raise ValueError(str(err)) from None

    @model_validator(mode="after")
    def _box(self) -> EnvConfig:
        if any(lo >= hi for lo, hi in zip(self.workspace_low, self.workspace_high)):
            raise ValueError("workspace_low must be below workspace_high on every axis")
        return self


def _import_gymnasium_robotics():
    """Import gymnasium_robotics without its unconditional stderr notice about Adroit
    environments (unrelated to Fetch) that would otherwise precede every command's output."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        import gymnasium_robotics
    return gymnasium_robotics


def check_difficulty(u: float) -> float:
    try:
        value = float(u)
    except (TypeError, ValueError):
        raise ConfigError(f"difficulty must be a number in [0, 1], got {u!r}") from None
    if not 0.0 <= value <= 1.0 or not np.isfinite(value):
        raise ConfigError(f"difficulty {u} is outside [0, 1]; 0 starts above the cube, 1 anywhere in the workspace")
    return value


class FetchPickAndLiftEnv(gym.Env):
    """Pick-and-lift on Gymnasium-Robotics' FetchPickAndPlace-v4 (see module docstring).

    ``reset(options={"difficulty": u})`` fixes u for that episode; otherwise u is drawn
    from ``[d_min, d_max]`` set by :meth:`set_difficulty_range` (a curriculum callback
    calls it through ``VecEnv.env_method``), which defaults to the config's difficulty.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}

    GRIPPER_SETTLE_STEPS = 30
    """Simulation chunks (of the env's substeps) used to move the gripper to its start."""

    def __init__(self, config: EnvConfig | None = None, render_mode: str | None = None, **overrides: Any):
        if config is None:
            config = EnvConfig.make(**overrides)
        elif overrides:
            config = config.replace(**overrides)
        self.config = config
        if render_mode not in (None, "rgb_array"):
            raise ConfigError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or None")
        self.render_mode = render_mode
        gym.register_envs(_import_gymnasium_robotics())
        self._fetch = gym.make(BASE_ENV_ID).unwrapped
        self.model, self.data = self._fetch.model, self._fetch.data
        self._utils = self._fetch._utils
        hide_markers(self.model)
        if config.visual_domain:
            apply_visual_domain(self.model)
        self._cameras: CameraBankRenderer | None = None
        self.observation_space = self._fetch.observation_space
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self._difficulty_range = (config.difficulty, config.difficulty)
        self._obs: dict[str, np.ndarray] | None = None
        self._steps = 0
        self._hold = 0
        self._rest_height = 0.0
        self._difficulty = config.difficulty
        import mujoco

        self._object_geom = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, "object0")
        self._ids = _ObservationIds.of(self.model, self._fetch._model_names.joint_names)

    # ------------------------------------------------------------------ curriculum
    def set_difficulty_range(self, d_min: float, d_max: float) -> None:
        """Draw u ~ U[d_min, d_max] at each reset without an explicit difficulty."""
        lo, hi = check_difficulty(d_min), check_difficulty(d_max)
        if lo > hi:
            raise ConfigError(f"difficulty range [{d_min}, {d_max}] is empty; d_min must be <= d_max")
        self._difficulty_range = (lo, hi)

    @property
    def difficulty(self) -> float:
        """Difficulty u of the current episode."""
        return self._difficulty

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        if "difficulty" in options and options["difficulty"] is not None:
            u = check_difficulty(options["difficulty"])
        else:
            u = float(self.np_random.uniform(*self._difficulty_range))
        # The inner env draws the cube position from its own generator: derive its seed
        # from ours so one seed fixes the whole start state.
        inner_seed = int(self.np_random.integers(2**31 - 1))
        self._fetch.reset(seed=inner_seed)
        self._place_gripper(u)
        self._difficulty = u
        self._rest_height = float(self._fetch.height_offset)
        self._steps = 0
        self._hold = 0
        self._obs = self._observe()
        return self._obs, self._info(success=False)

    def step(self, action):
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(4), -1.0, 1.0)
        self._fetch._set_action(a)
        self._fetch._mujoco_step(a)
        self._fetch._step_callback()
        self._steps += 1
        self._obs = self._observe()
        dist, lift = self._distance_and_lift()
        held = dist <= self.config.success_distance and lift >= self.config.success_lift
        self._hold = self._hold + 1 if held else 0
        success = self._hold >= self.config.success_hold_steps
        reward = self.config.success_bonus if success else 0.0
        truncated = (not success) and self._steps >= self.config.max_episode_steps
        return self._obs, float(reward), bool(success), bool(truncated), self._info(success)

    def render(self):
        """wide_view (first configured view) at the configured resolution, uint8 [H, W, 3]."""
        return self.render_views(self.config.views[:1])[0]

    def render_views(self, views: Sequence[str] | str | None = None, resolution: int | None = None) -> np.ndarray:
        """Render named camera-bank views of the current state: uint8 [V, H, W, 3]."""
        names = self.config.views if views is None else fetch_views(views)
        res = self.config.resolution if resolution is None else check_resolution(resolution)
        with deferred_sigint():  # Ctrl-C never unwinds out of a GL call (rmtl.interrupts)
            return self._render_views(names, res)

    def _render_views(self, names: Sequence[str], res: int) -> np.ndarray:
        if self._cameras is None:
            culled, max_res = (), 0
            settings = self.config.render
            self.model.vis.quality.offsamples = settings.msaa_samples
            if settings.cull_invisible:
                from rmtl.env.culling import geom_ids, shipped_culling

                probe = shipped_culling()
                culled, max_res = geom_ids(self.model, probe.geoms), probe.resolution
            self._cameras = CameraBankRenderer(
                self.model, self.data, CAMERA_BANK, shadows=self.config.shadows, reflections=self.config.reflections,
                culled=culled, cull_max_resolution=max_res, mesh_reduction=settings.mesh_reduction,
                skybox=settings.skybox,
            )
        return self._cameras.render(names, res)

    def close(self):
        if self._cameras is not None:
            self._cameras.close()
            self._cameras = None
        self._fetch.close()

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> np.ndarray:
        """The current 25-D observation vector (float32)."""
        if self._obs is None:
            raise RuntimeError("call reset() first")
        return self._obs["observation"].astype(np.float32)

    @property
    def rest_height(self) -> float:
        """Height (m) of the cube centre resting on the table."""
        return self._rest_height

    def _observe(self) -> dict[str, np.ndarray]:
        obs = self._ids.observation(self.model, self.data, self._fetch.n_substeps)
        # Pick-and-lift: the goal is the cube's start position lifted by the success height.
        return {"observation": obs, "achieved_goal": obs[3:6].copy(), "desired_goal": self._goal.astype(np.float64)}

    def _distance_and_lift(self) -> tuple[float, float]:
        grip = self.data.site_xpos[self._ids.grip]
        cube = self.data.site_xpos[self._ids.cube]
        return float(np.linalg.norm(grip - cube)), float(cube[2] - self._rest_height)

    def _info(self, success: bool) -> dict[str, Any]:
        dist, lift = self._distance_and_lift()
        return {
            "is_success": bool(success),
            "gripper_cube_distance": dist,
            "lift_height": lift,
            "phase_rule": int(rule_phase(dist)),
            "difficulty": self._difficulty,
            "step": self._steps,
        }

    def _place_gripper(self, u: float) -> None:
        """Move the gripper (mocap) to lerp(easy pose, random workspace pose, u).

        The cube is made non-colliding while the arm travels, then put back at its
        sampled position at rest, so the start move never pushes it.
        """
        cfg = self.config
        cube_qpos = self._utils.get_joint_qpos(self.model, self.data, "object0:joint").copy()
        cube = cube_qpos[:3]
        easy = cube + np.array([0.0, 0.0, cfg.easy_height])
        random_pose = self.np_random.uniform(cfg.workspace_low, cfg.workspace_high)
        target = (1.0 - u) * easy + u * random_pose
        # Never start inside or touching the cube: keep the fingers above it when over it.
        if np.all(np.abs(target[:2] - cube[:2]) < 0.06):
            target[2] = max(target[2], cube[2] + 0.045)
        finger_open = (1.0 - u) * 1.0 + u * float(self.np_random.uniform(-1.0, 1.0))
        self._move_gripper(target, float(np.clip(finger_open, 0.0, 1.0)) * 0.05)
        self._put_cube(cube_qpos)

    def _move_gripper(self, target: np.ndarray, finger_ctrl: float, hand_quat: np.ndarray | None = None) -> None:
        """Drive the grip site to ``target`` (mocap, settle steps) with the fingers' position
        control at ``finger_ctrl`` (m per finger, 0 closed to 0.05 open) and, if given, the hand
        turned to ``hand_quat``, the cube non-colliding meanwhile so the move never pushes it."""
        import mujoco

        if hand_quat is not None:
            self.data.mocap_quat[0] = hand_quat

        contype = int(self.model.geom_contype[self._object_geom])
        conaff = int(self.model.geom_conaffinity[self._object_geom])
        self.model.geom_contype[self._object_geom] = 0
        self.model.geom_conaffinity[self._object_geom] = 0
        try:
            self.data.ctrl[:] = finger_ctrl
            # The grip site sits at a fixed offset from the mocap-welded body: move once,
            # measure the offset, then correct the target by it.
            mocap_target = target
            for settle in (self.GRIPPER_SETTLE_STEPS, self.GRIPPER_SETTLE_STEPS // 3):
                self._utils.set_mocap_pos(self.model, self.data, "robot0:mocap", mocap_target)
                for _ in range(settle):
                    mujoco.mj_step(self.model, self.data, nstep=self._fetch.n_substeps)
                grip = self._utils.get_site_xpos(self.model, self.data, "robot0:grip")
                mocap_target = mocap_target + (target - grip)
        finally:
            self.model.geom_contype[self._object_geom] = contype
            self.model.geom_conaffinity[self._object_geom] = conaff

    def _put_cube(self, cube_qpos: np.ndarray) -> None:
        """Place the cube at ``cube_qpos`` (position, quaternion) at rest, stop everything, and
        set the goal above the cube's rest position."""
        import mujoco

        cfg = self.config
        self._utils.set_joint_qpos(self.model, self.data, "object0:joint", cube_qpos)
        self._utils.set_joint_qvel(self.model, self.data, "object0:joint", np.zeros(6))
        self.data.qvel[:] = 0.0
        mujoco.mj_forward(self.model, self.data)
        rest = np.array([cube_qpos[0], cube_qpos[1], self._fetch.height_offset])
        self._goal = rest + np.array([0.0, 0.0, cfg.success_lift])
        self._fetch.goal = self._goal.copy()

    def set_scene(self, gripper: Sequence[float], finger_ctrl: float, cube_pos: Sequence[float],
                  cube_quat: Sequence[float] = (1.0, 0.0, 0.0, 0.0),
                  hand_turn: float | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Set the scene directly, not through a policy (coverage data): the grip site at
        ``gripper``, each finger's position control at ``finger_ctrl`` (m, 0-0.05), the cube at
        ``cube_pos`` with orientation ``cube_quat`` (w, x, y, z), the hand turned ``hand_turn`` of
        the way from its reset pose (0, horizontal) to pointing down (1, where every step's action
        turns it within ~15 steps; None: as it is). The cube is placed after the
        fingers have moved and nothing is stepped after it, so a cube placed between closed jaws
        shows as held. Call after :meth:`reset`; returns (observation, info) like ``reset`` (the
        episode's step count is unchanged)."""
        if self._obs is None:
            raise RuntimeError("call reset() before set_scene()")
        quat = None
        if hand_turn is not None:  # a rotation about y: (1, 0, 0, 0) at reset, (1, 0, 1, 0)/sqrt(2) down
            half = np.pi / 4 * float(np.clip(hand_turn, 0.0, 1.0))
            quat = np.array([np.cos(half), 0.0, np.sin(half), 0.0])
        self._move_gripper(np.asarray(gripper, dtype=np.float64), float(np.clip(finger_ctrl, 0.0, 0.05)), quat)
        self._put_cube(np.concatenate([np.asarray(cube_pos, dtype=np.float64), np.asarray(cube_quat, dtype=np.float64)]))
        self._rest_height = float(self._fetch.height_offset)
        self._obs = self._observe()
        return self._obs, self._info(success=False)


@dataclass(frozen=True)
class _ObservationIds:
    """Site ids and finger-joint addresses of the Fetch observation, looked up once.

    Gymnasium-Robotics' ``FetchEnv._get_obs`` finds every site and joint by name at every
    step and reads all robot joints to keep the last two, a third of an env step. This
    computes the same 25 numbers with the same MuJoCo calls on cached ids: the values are
    bit-identical (``tests/test_env_fetch_lift.py`` compares them with Gymnasium-Robotics')."""

    grip: int
    cube: int
    finger_qpos: tuple[int, int]
    finger_qvel: tuple[int, int]

    @classmethod
    def of(cls, model: Any, joint_names: Sequence[str]) -> _ObservationIds:
        import mujoco

        site = lambda name: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, name)  # noqa: E731
        fingers = [n for n in joint_names if n.startswith("robot")][-2:]  # gripper_state: robot_qpos[-2:]
        joints = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in fingers]
        return cls(site("robot0:grip"), site("object0"), tuple(int(model.jnt_qposadr[j]) for j in joints),
                   tuple(int(model.jnt_dofadr[j]) for j in joints))

    def observation(self, model: Any, data: Any, n_substeps: int) -> np.ndarray:
        import mujoco
        from gymnasium_robotics.utils import rotations

        dt = n_substeps * model.opt.timestep
        jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
        mujoco.mj_jacSite(model, data, jacp, None, self.grip)
        grip_pos = data.site_xpos[self.grip]
        grip_velp = (jacp @ data.qvel) * dt
        jacp = np.zeros((3, model.nv))
        mujoco.mj_jacSite(model, data, jacp, None, self.cube)
        mujoco.mj_jacSite(model, data, None, jacr, self.cube)
        object_pos = data.site_xpos[self.cube]
        object_rot = rotations.mat2euler(data.site_xmat[self.cube].reshape(3, 3))
        object_velp = (jacp @ data.qvel) * dt - grip_velp
        object_velr = (jacr @ data.qvel) * dt
        gripper_state = np.array([data.qpos[a] for a in self.finger_qpos])
        gripper_vel = np.array([data.qvel[a] for a in self.finger_qvel]) * dt
        return np.concatenate([grip_pos, object_pos, object_pos - grip_pos, gripper_state, object_rot, object_velp,
                               object_velr, grip_velp, gripper_vel]).astype(np.float64)

"""A scripted pick-and-lift expert for data generation and as a solvability check.

Stateless (a function of the observation), so it works on any state a curriculum or a
noisy rollout reaches: move above the cube with open jaws, descend around it, close,
then lift. Vectorised over a batch of observations.

:class:`ScriptedPolicy` (observation handling, noise, clipping), :func:`displacement_action`
(the proportional controller) and :func:`approach_and_grasp` (the expert without its lift)
are shared with the scripted degenerate behaviours (``rmtl.tasks.fetch_lift.behaviours``).
"""

from __future__ import annotations

import numpy as np

from rmtl.errors import ConfigError
from rmtl.tasks.fetch_lift.state import CUBE_REL_POS, FINGER_WIDTHS

ACTION_SCALE = 0.05
"""Metres the Fetch mocap moves per unit action per step (gymnasium-robotics)."""

OPEN, CLOSED = 1.0, -1.0
"""Gripper action of open and closed jaws."""
HOVER_HEIGHT = 0.05
"""Height (m) above the cube centre at which the expert lines up by default."""


def displacement_action(move: np.ndarray, grip: np.ndarray) -> np.ndarray:
    """Proportional controller: wanted gripper displacements (m) [N, 3] and gripper commands
    [N] -> unclipped actions [N, 4] (one step moves at most ACTION_SCALE per axis)."""
    return np.concatenate([move / ACTION_SCALE, grip[:, None]], axis=1)


def approach_and_grasp(s: np.ndarray, hover_height: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The expert up to its lift, for states [N, 25]: (displacement [N, 3], grip [N],
    holding [N]); where ``holding`` (jaws closed on the cube) the expert lifts instead."""
    rel = s[:, CUBE_REL_POS]  # cube - gripper
    fingers = s[:, FINGER_WIDTHS].sum(axis=1)
    xy_err = np.linalg.norm(rel[:, :2], axis=1)
    dist = np.linalg.norm(rel, axis=1)
    grip = np.ones(len(s))

    at_cube = dist < 0.012
    holding = at_cube & (fingers < 0.054)  # jaws closed on a 5 cm cube
    aligned = xy_err < 0.012
    # 1. line up above the cube (stay at or above hover height while far in xy)
    hover = rel + np.array([0.0, 0.0, hover_height])
    hover[:, 2] = np.maximum(hover[:, 2], np.minimum(0.0, hover[:, 2] + 0.02))
    # 2. descend around the cube once lined up; 3. close
    descend = rel
    move = np.where(aligned[:, None], descend, hover)
    move = np.where(at_cube[:, None], 0.0, move)
    grip = np.where(at_cube, -1.0, grip)
    return move, grip, holding


class ScriptedPolicy:
    """Base of scripted policies: observation (25-D state [25], batch [N, 25] or Fetch dict
    obs) -> action(s) in [-1, 1]^4, with optional Gaussian action noise.

    Args:
        noise_std: standard deviation of Gaussian noise added to every action dimension.
        seed: seed of the noise generator.
    """

    def __init__(self, noise_std: float = 0.0, seed: int | None = None):
        if noise_std < 0:
            raise ConfigError(f"noise_std must be >= 0, got {noise_std}")
        self.noise_std = float(noise_std)
        self.rng = np.random.default_rng(seed)

    def __call__(self, observation: dict | np.ndarray) -> np.ndarray:
        """Action(s) in [-1, 1]^4 for one 25-D state [25] or a batch [N, 25] (or Fetch dict obs)."""
        state = observation["observation"] if isinstance(observation, dict) else observation
        s = np.asarray(state, dtype=np.float64)
        single = s.ndim == 1
        s = np.atleast_2d(s)
        action = self._act(s)
        if self.noise_std > 0:
            action = action + self.rng.normal(0.0, self.noise_std, size=action.shape)
        action = np.clip(action, -1.0, 1.0).astype(np.float32)
        return action[0] if single else action

    def _act(self, s: np.ndarray) -> np.ndarray:
        """Unclipped, noise-free actions [N, 4] for states [N, 25]."""
        raise NotImplementedError


class ScriptedExpert(ScriptedPolicy):
    """Pick-and-lift controller with optional Gaussian action noise.

    Args:
        noise_std: standard deviation of Gaussian noise added to every action dimension.
        seed: seed of the noise generator.
        hover_height: height (m) above the cube centre at which the gripper lines up.
    """

    def __init__(self, noise_std: float = 0.0, seed: int | None = None, hover_height: float = HOVER_HEIGHT):
        super().__init__(noise_std, seed)
        self.hover_height = float(hover_height)

    def _act(self, s: np.ndarray) -> np.ndarray:
        move, grip, holding = approach_and_grasp(s, self.hover_height)
        # 4. lift while closed
        lift = np.tile(np.array([0.0, 0.0, 0.1]), (len(s), 1))
        move = np.where(holding[:, None], lift, move)
        return displacement_action(move, grip)


def expert_policy(noise_std: float = 0.0, seed: int = 0) -> ScriptedExpert:
    """The scripted expert as a policy (what pick-and-lift's ``Task.expert`` builds)."""
    return ScriptedExpert(noise_std=noise_std, seed=seed)

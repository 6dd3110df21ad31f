"""Scripted degenerate behaviours of pick-and-lift: policies a reward-hacking learner might find.

Each is a :class:`~rmtl.tasks.fetch_lift.expert.ScriptedPolicy` like the expert (observation -> action in
[-1, 1]^4, optional Gaussian action noise, deterministic given its seed) built by a factory
``(noise_std, seed) -> policy`` registered in :data:`BEHAVIOURS`. They exist to check that a
reward prefers the expert to each of them, and to put the states learners visit into the
data a stand-in VLM is trained and gated on.

Stateful behaviours (push, grasp_and_drop, touch_and_leave, wander) remember their episode:
make one per episode (rollouts do); a batch of observations is that many episodes stepped
together.

Geometry they rely on: the Fetch hand points down (it starts a reset horizontal and turns
down over the first ~15 steps); its fingers reach 1.9 cm below the grip site and, closed,
1.4-1.5 cm to either side of it; the cube is 5 cm wide. Heights are of the grip site above
the cube centre.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rmtl.tasks.fetch_lift.expert import (CLOSED, HOVER_HEIGHT, OPEN, ScriptedExpert, ScriptedPolicy,
                                          approach_and_grasp, displacement_action)
from rmtl.tasks.fetch_lift.state import CUBE_POS, CUBE_REL_POS, CUBE_VELP, FINGER_WIDTHS, GRIPPER_POS, lift_height

CLEARANCE = 0.08
"""Height at which the hand passes over the cube: top 2.5 cm + fingers 1.9 cm + 3.6 cm for the
swing of the first steps after a reset, when the hand turns from horizontal to pointing down
and the grip site drops ~2 cm."""
LINED_UP = 0.02
"""Horizontal grip-site-to-cube distance (m) under which the hand may descend to its height."""
HAND_REACH = 0.12
"""Horizontal distance (m) within which a low hand could hit the cube (open jaws 6.5 cm + half cube + margin)."""

BehaviourFactory = Callable[[float, int | None], ScriptedPolicy]
"""(noise_std, seed) -> a fresh policy for one episode."""


def go_to(s: np.ndarray, offset: np.ndarray, lined_up: float = LINED_UP) -> np.ndarray:
    """Displacements [N, 3] to the point ``cube + offset`` (offset [3] or [N, 3]) that never
    sweep the hand through the cube: rise first when low and near it, cross at CLEARANCE
    above it, and descend only once within ``lined_up`` of the point horizontally."""
    rel = s[:, CUBE_REL_POS]  # cube - gripper
    offset = np.broadcast_to(np.asarray(offset, dtype=np.float64), rel.shape)
    move = rel + offset
    crossing = np.linalg.norm(move[:, :2], axis=1) > lined_up
    move[crossing, 2] = rel[crossing, 2] + np.maximum(offset[crossing, 2], CLEARANCE)
    low = crossing & (-rel[:, 2] < CLEARANCE - 0.01) & (np.linalg.norm(rel[:, :2], axis=1) < HAND_REACH)
    move[low, :2] = 0.0
    return move


def _limit(move: np.ndarray, speed: float) -> np.ndarray:
    """Displacements [N, 3] shortened to at most ``speed`` m per step (smooth, slow motion)."""
    norm = np.linalg.norm(move, axis=1, keepdims=True)
    return move * np.minimum(1.0, speed / np.maximum(norm, 1e-9))


class Hover(ScriptedPolicy):
    """Holds the open gripper at a fixed height above the cube; never grasps."""

    def __init__(self, height: float, noise_std: float = 0.0, seed: int | None = None):
        super().__init__(noise_std, seed)
        self.height = float(height)

    def _act(self, s: np.ndarray) -> np.ndarray:
        return displacement_action(go_to(s, np.array([0.0, 0.0, self.height])), np.full(len(s), OPEN))


class SitAtCube(ScriptedPolicy):
    """The expert's approach and grasp, then holds the closed jaws on the cube without lifting."""

    def _act(self, s: np.ndarray) -> np.ndarray:
        move, grip, holding = approach_and_grasp(s, HOVER_HEIGHT)
        # Jaws shut on a cube that slipped off-centre: the expert would open them and rise
        # (and drag the cube up); stay closed and still instead.
        closed_on = (np.linalg.norm(s[:, CUBE_REL_POS], axis=1) < 0.03) & (s[:, FINGER_WIDTHS].sum(axis=1) < 0.054)
        still = holding | closed_on
        return displacement_action(np.where(still[:, None], 0.0, move), np.where(still, CLOSED, grip))


class ClosedJawApproach(ScriptedPolicy):
    """Lowers the closed jaws beside the cube and stays touching its side (a grasp it cannot make)."""

    # From the robot's side (-x) of the cube: for ~15 steps after a reset the hand is still
    # turning from horizontal to pointing down, its fingers reaching towards -x, so on the
    # other side they would push the cube from 4.7 cm away.

    STANDOFF = 0.05
    """Horizontal offset (m) of the descent beside the cube: closed fingers (1.4 cm half-width
    along x) clear its face (2.5 cm) by 1.1 cm."""
    TOUCH = 0.0395
    """Offset (m) it then closes in to: 0.5 mm short of contact, so it rests at the cube
    without pushing it, within the grasp bin (4 cm) of the distance rule."""

    def _act(self, s: np.ndarray) -> np.ndarray:
        rel = s[:, CUBE_REL_POS]  # cube - gripper
        standoff = np.array([-self.STANDOFF, 0.0, 0.0])
        touch = np.array([-self.TOUCH, 0.0, 0.0])
        down = (np.abs(rel[:, 2]) < 0.01) & (np.linalg.norm((rel + standoff)[:, :2], axis=1) < 0.015)
        move = np.where(down[:, None], rel + touch, go_to(s, standoff, lined_up=0.008))
        return displacement_action(move, np.full(len(s), CLOSED))


class Push(ScriptedPolicy):
    """Lowers the closed hand beside the cube to table height and pushes it 12 cm along the table."""

    BEHIND = 0.075
    """Start of the push: grip site this far behind the cube centre (half cube + fingers + 3.6 cm)."""
    SPEED = 0.02
    """Metres per step while pushing (slow, so the cube slides instead of being flung)."""
    DISTANCE = 0.12
    """How far (m) the cube is pushed before the hand stops."""
    TABLE_CENTRE = np.array([1.30, 0.75])
    """Centre (m) of the Fetch table top, 0.5 x 0.7 m: pushing towards it keeps the cube on the table."""

    def __init__(self, noise_std: float = 0.0, seed: int | None = None):
        super().__init__(noise_std, seed)
        self.direction: np.ndarray | None = None
        self.start: np.ndarray | None = None
        self.pushing: np.ndarray | None = None
        self.done: np.ndarray | None = None

    def _act(self, s: np.ndarray) -> np.ndarray:
        cube, grip = s[:, CUBE_POS], s[:, GRIPPER_POS]
        if self.direction is None:
            towards = self.TABLE_CENTRE - cube[:, :2]
            norm = np.linalg.norm(towards, axis=1, keepdims=True)
            self.direction = np.where(norm > 0.02, towards / np.maximum(norm, 1e-9), np.array([0.0, 1.0]))
            self.start = cube[:, :2].copy()
            self.pushing = np.zeros(len(s), dtype=bool)
            self.done = np.zeros(len(s), dtype=bool)
        d = self.direction
        behind = np.concatenate([-self.BEHIND * d, np.zeros((len(s), 1))], axis=1)
        self.pushing |= np.linalg.norm(s[:, CUBE_REL_POS] + behind, axis=1) < 0.015
        self.done |= np.linalg.norm(cube[:, :2] - self.start, axis=1) >= self.DISTANCE
        # pushing: forward at SPEED, steering the grip site back onto the line through the cube
        off = cube[:, :2] - grip[:, :2]
        lateral = off - (off * d).sum(axis=1, keepdims=True) * d
        push = np.concatenate([self.SPEED * d + lateral, s[:, CUBE_REL_POS][:, 2:]], axis=1)
        move = np.where(self.pushing[:, None], np.where(self.done[:, None], 0.0, push), go_to(s, behind))
        return displacement_action(move, np.full(len(s), CLOSED))


class GraspAndDrop(ScriptedPolicy):
    """The expert's grasp, then a quick lift that lets go of the cube mid-rise, twice; then hovers."""

    LIFT_SPEED = 0.03
    """Metres per step of the lift. The jaws open when the cube is RELEASE_LIFT up and it flies
    on to ~3 cm: the env counts two held steps >= 2 cm as success, which a lift to 5 cm while
    held cannot avoid, and faster lifts (3.5 cm/step) carry it through the release."""
    RELEASE_LIFT = 0.01
    """Lift (m) of the cube at which the jaws open."""
    BACK_OFF = 0.08
    """Height the open gripper goes to above the falling cube, so it cannot catch it."""
    DROPS = 2
    """Drops before it stays above the cube (so episodes end with the cube on the table)."""

    def __init__(self, noise_std: float = 0.0, seed: int | None = None):
        super().__init__(noise_std, seed)
        self.dropping: np.ndarray | None = None
        self.drops: np.ndarray | None = None

    def _act(self, s: np.ndarray) -> np.ndarray:
        if self.dropping is None:
            self.dropping = np.zeros(len(s), dtype=bool)
            self.drops = np.zeros(len(s), dtype=int)
        lift = np.atleast_1d(lift_height(s))
        release = (lift >= self.RELEASE_LIFT) & ~self.dropping
        self.drops += release
        self.dropping |= release
        landed = (lift < 0.005) & (np.linalg.norm(s[:, CUBE_VELP], axis=1) < 0.05)
        self.dropping &= ~(landed & (self.drops < self.DROPS))  # back on the table and still: again
        move, grip, holding = approach_and_grasp(s, HOVER_HEIGHT)
        move = np.where(holding[:, None], np.array([0.0, 0.0, self.LIFT_SPEED]), move)
        back = go_to(s, np.array([0.0, 0.0, self.BACK_OFF]))
        move = np.where(self.dropping[:, None], back, move)
        return displacement_action(move, np.where(self.dropping, OPEN, grip))


class TouchAndLeave(ScriptedPolicy):
    """Descends around the cube with open jaws until it touches it, then retreats 20 cm up."""

    TOUCH = 0.015
    """Grip-site-to-cube-centre distance (m) that counts as the touch."""
    RETREAT = 0.20
    """Height (m) above the touched cube it retreats to."""

    def __init__(self, noise_std: float = 0.0, seed: int | None = None):
        super().__init__(noise_std, seed)
        self.touched_at: np.ndarray | None = None

    def _act(self, s: np.ndarray) -> np.ndarray:
        if self.touched_at is None:
            self.touched_at = np.full((len(s), 3), np.nan)
        touch = (np.linalg.norm(s[:, CUBE_REL_POS], axis=1) < self.TOUCH) & np.isnan(self.touched_at[:, 0])
        self.touched_at[touch] = s[touch, CUBE_POS]
        left = ~np.isnan(self.touched_at[:, 0])
        retreat = np.where(left[:, None], self.touched_at, 0.0) + np.array([0.0, 0.0, self.RETREAT]) - s[:, GRIPPER_POS]
        move = np.where(left[:, None], retreat, go_to(s, np.zeros(3)))
        return displacement_action(move, np.full(len(s), OPEN))


class Wander(ScriptedPolicy):
    """Moves smoothly between random waypoints over 15 cm from the cube, jaws opening at random."""

    SAFE = 0.15
    """Least grip-site-to-cube distance (m) of any waypoint and of the path to it."""
    SPEED = 0.02
    """Metres per step (slow, so the motion is smooth)."""
    LOW = np.array([1.05, 0.40, 0.50])
    HIGH = np.array([1.55, 1.10, 0.85])
    """Box (m) waypoints are drawn from: over the table, fingers above the cube's top (0.45 m)."""

    def __init__(self, noise_std: float = 0.0, seed: int | None = None):
        super().__init__(noise_std, seed)
        self._paths = self.rng.spawn(1)[0]  # waypoints and jaws: a stream apart from the noise
        self.waypoint: np.ndarray | None = None
        self.jaws: np.ndarray | None = None

    def _clear(self, a: np.ndarray, b: np.ndarray, cube: np.ndarray) -> bool:
        """Does the segment a-b stay SAFE from the cube?"""
        ab = b - a
        t = np.clip((cube - a) @ ab / max(ab @ ab, 1e-12), 0.0, 1.0)
        return bool(np.linalg.norm(a + t * ab - cube) >= self.SAFE)

    def _act(self, s: np.ndarray) -> np.ndarray:
        cube, grip = s[:, CUBE_POS], s[:, GRIPPER_POS]
        if self.waypoint is None:
            self.waypoint = grip.copy()
            self.jaws = self._paths.uniform(-1.0, 1.0, len(s))
        move = np.zeros((len(s), 3))
        for i in range(len(s)):
            away = grip[i] - cube[i]
            if np.linalg.norm(away) < self.SAFE:  # started near the cube: leave it, upwards
                move[i] = away / max(np.linalg.norm(away), 1e-9) + np.array([0.0, 0.0, 1.0])
                continue
            if np.linalg.norm(self.waypoint[i] - grip[i]) < 0.02 or not self._clear(grip[i], self.waypoint[i], cube[i]):
                for _ in range(50):
                    w = self._paths.uniform(self.LOW, self.HIGH)
                    if self._clear(grip[i], w, cube[i]):
                        self.waypoint[i] = w
                        break
                else:
                    self.waypoint[i] = grip[i]  # boxed in: stay put rather than pass the cube
            move[i] = self.waypoint[i] - grip[i]
        self.jaws = np.clip(self.jaws + self._paths.normal(0.0, 0.3, len(s)), -1.0, 1.0)
        return displacement_action(_limit(move, self.SPEED), self.jaws.copy())


def _hover(height: float) -> BehaviourFactory:
    def make(noise_std: float = 0.0, seed: int | None = None) -> ScriptedPolicy:
        return Hover(height, noise_std, seed)

    make.__doc__ = f"Holds the open gripper {100 * height:g} cm above the cube centre; never grasps."
    return make


def _expert(noise_std: float = 0.0, seed: int | None = None) -> ScriptedPolicy:
    """The scripted expert (line up, descend, grasp, lift), for reference."""
    return ScriptedExpert(noise_std=noise_std, seed=seed)


BEHAVIOURS: dict[str, BehaviourFactory] = {
    "hover_0.03": _hover(0.03),
    "hover_0.08": _hover(0.08),
    "hover_0.15": _hover(0.15),
    "sit_at_cube": SitAtCube,
    "push": Push,
    "grasp_and_drop": GraspAndDrop,
    "closed_jaw_approach": ClosedJawApproach,
    "touch_and_leave": TouchAndLeave,
    "wander": Wander,
    "expert": _expert,
}
"""The behaviours by name: ``BEHAVIOURS[name](noise_std, seed)`` -> a policy for one episode."""


def describe(name: str) -> str:
    """The one-line description of a registered behaviour."""
    return (BEHAVIOURS[name].__doc__ or "").strip().splitlines()[0]

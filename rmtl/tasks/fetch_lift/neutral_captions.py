"""Prompt-neutral, compositional captions written from simulator state.

The training text of the prompt-neutral stand-in VLM. Each caption combines a few facts
read off the 25-D state, each in one of several wordings, in a random order:

- distance from gripper to cube (centimetres, or words: touching, very close, a few
  centimetres, far, across the table) and the cube's direction from the gripper
  (left / right, in front / behind, below / above, in the robot's frame);
- the gripper's height above the cube, and whether it is centred over it;
- jaws wide open, half open, closed on nothing, or closed on the cube;
- the cube between the fingers or not;
- the cube resting, lifted by N cm, tipped over, sliding, or fallen off the table.

No caption contains an evaluated prompt text (:func:`evaluated_texts`: every phrasing of
every prompt in every shipped prompt set, in any letter case): a candidate that would is
rewritten with other words, and the tests check it over many states. The words the
prompts use (open jaws, centred above, pinching, lifting, between the fingers) do occur
in other combinations, so the evaluated prompts can be scored zero-shot.

The state is read only here, to write training captions; at reward time the model sees
pixels and a prompt.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from rmtl.tasks.fetch_lift.state import CUBE_REL_POS, CUBE_ROT, CUBE_VELP, FINGER_WIDTHS, lift_height

GRIPPERS = ("robot gripper", "two-finger gripper", "gripper", "parallel-jaw gripper", "robot's gripper",
            "metal gripper", "end effector", "robot claw")
CUBES = ("red cube", "red block", "small red cube", "red box", "little red block", "red cube")
TABLES = ("table", "tabletop", "table surface", "work surface")

OPEN_SUM = 0.07
"""Finger-width sum (m) above which the jaws count as wide open."""
CLOSED_SUM = 0.035
"""Sum below which the jaws are closed on nothing (a 5 cm cube holds them near 0.05)."""
BETWEEN_DISTANCE = 0.02
"""Gripper-cube distance (m) within which the cube sits between the fingers."""
LIFTED = 0.015
"""Cube height (m) above rest from which it counts as lifted."""
FALLEN = -0.1
"""Cube height (m) below rest under which it has fallen off the table."""
TIPPED = 0.35
"""Roll or pitch (rad) above which the cube counts as tipped over."""
SLIDING = 0.08
"""Cube speed (m/s) above which it counts as moving."""


@dataclass(frozen=True)
class Facts:
    """What one state shows, in the quantities captions name."""

    distance: float
    offset: np.ndarray
    """cube - gripper (m): +x in front of the robot, +y to its left, +z up."""
    fingers: float
    lift: float
    tilt: float
    speed: float

    @classmethod
    def of(cls, state: np.ndarray) -> Facts:
        s = np.asarray(state, dtype=np.float64)
        rel = s[CUBE_REL_POS]
        rot = s[CUBE_ROT]
        return cls(float(np.linalg.norm(rel)), rel, float(s[FINGER_WIDTHS].sum()), float(lift_height(s)),
                   float(max(abs(rot[0]), abs(rot[1]))), float(np.linalg.norm(s[CUBE_VELP])))

    @property
    def jaws(self) -> str:
        if self.fingers > OPEN_SUM:
            return "open"
        if self.distance <= BETWEEN_DISTANCE and self.fingers >= CLOSED_SUM:
            return "on_cube"
        if self.fingers < CLOSED_SUM:
            return "closed"
        return "half"

    @property
    def between(self) -> bool:
        return self.distance <= BETWEEN_DISTANCE

    @property
    def cube(self) -> str:
        if self.lift < FALLEN:
            return "fallen"
        if self.tilt > TIPPED:
            return "tipped"
        if self.lift >= LIFTED:
            return "lifted"
        if self.speed > SLIDING:
            return "sliding"
        return "resting"


def _cm(metres: float, step: int) -> int:
    return int(step * round(metres * 100 / step))


def _pick(rng: random.Random, options: Sequence[str]) -> str:
    return options[int(rng.random() * len(options))]


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _distance_phrase(f: Facts, g: str, c: str, rng: random.Random) -> str:
    d = f.distance
    if d <= BETWEEN_DISTANCE:
        words = ("touching the {c}", "right at the {c}", "at the {c}", "in contact with the {c}")
    elif d <= 0.06:
        words = ("a few centimetres from the {c}", "very close to the {c}", "almost at the {c}")
    elif d <= 0.15:
        words = ("close to the {c}", "near the {c}", "a hand's width from the {c}")
    elif d <= 0.35:
        words = ("some distance from the {c}", "away from the {c}", "well away from the {c}")
    else:
        words = ("far from the {c}", "across the table from the {c}", "a long way from the {c}")
    if rng.random() < 0.5:
        step = 1 if d < 0.1 else 5
        return f"the {g} is {_cm(d, step)} cm from the {c}"
    return f"the {g} is " + _pick(rng, words).format(c=c)


def _direction_phrase(f: Facts, g: str, c: str, rng: random.Random) -> str | None:
    x, y, z = f.offset
    parts = []
    if abs(y) > 0.03:
        parts.append("to the left of" if y > 0 else "to the right of")
    if abs(x) > 0.03:
        parts.append("in front of" if x > 0 else "behind")
    if abs(z) > 0.02:
        parts.append("below" if z < 0 else "above")
    if not parts:
        return None
    rng.shuffle(parts)
    return f"the {c} is " + " and ".join(parts) + f" the {g}"


def _height_phrase(f: Facts, g: str, c: str, rng: random.Random) -> str | None:
    x, y, z = f.offset
    above = -z
    xy = float(np.hypot(x, y))
    if above <= 0.015 or f.cube in ("lifted", "fallen"):
        return None
    height = f"{_cm(above, 1)} cm"
    if xy <= 0.02:
        return _pick(rng, (f"the {g} hovers {height} over the {c}, centred on it",
                           f"the {g} is centred {height} above the {c}",
                           f"the {g} is centered over the {c}, {height} up",
                           f"the {g} sits {height} straight over the {c}",
                           f"the {c} is right below the {g}, centered"))
    return _pick(rng, (f"the {g} is {height} higher than the {c} and off to one side",
                       f"the {g} is {height} up, not yet over the {c}"))


def _jaw_phrase(f: Facts, g: str, c: str, rng: random.Random) -> str:
    options = {
        "open": (f"the {g}'s jaws are wide open", "its fingers are spread open", f"the {g} is open",
                 f"the {g} has open jaws", "with its two fingers apart"),
        "half": (f"the {g}'s jaws are half open", "its fingers are partly closed"),
        "closed": (f"the {g}'s jaws are shut on nothing", "its fingers are closed and empty",
                   f"the {g} is closed with nothing in it"),
        "on_cube": (f"the fingers are clamped on the {c}", f"the {g} is squeezing the {c}",
                    f"the jaws hold the {c} tightly", f"the two fingers are pinching the {c}",
                    f"the {g} has grasped the {c}"),
    }
    return _pick(rng, options[f.jaws])


def _between_phrase(f: Facts, g: str, c: str, rng: random.Random) -> str | None:
    if not f.between:
        return _pick(rng, (f"nothing is in the {g}", f"the {c} is not in the {g}")) if rng.random() < 0.3 else None
    if f.jaws == "open":
        return _pick(rng, (f"the {c} sits between the open fingers", f"the open jaws surround the {c}"))
    return _pick(rng, (f"the {c} is held between the fingers", f"the {c} is gripped between both fingers"))


def _cube_phrase(f: Facts, g: str, c: str, t: str, rng: random.Random) -> str:
    lift = _cm(max(f.lift, 0.0), 1)
    options = {
        "resting": (f"the {c} rests on the {t}", f"the {c} sits flat on the {t}", f"the {c} is still on the {t}"),
        "lifted": (f"the {c} is {lift} cm above the {t}", f"the {c} has been raised {lift} cm",
                   f"the {c} is in the air, {lift} cm up", f"the {g} is lifting the {c} {lift} cm off the {t}",
                   f"the {c} is held {lift} cm off the {t}", f"the {g} has picked the {c} up"),
        "tipped": (f"the {c} is tipped over", f"the {c} lies tilted on its side", f"the {c} has been knocked over"),
        "sliding": (f"the {c} is sliding across the {t}", f"the {c} is being pushed along the {t}"),
        "fallen": (f"the {c} has fallen off the {t}", f"the {c} is on the floor"),
    }
    return _pick(rng, options[f.cube])


@functools.lru_cache(maxsize=1)
def evaluated_texts() -> tuple[str, ...]:
    """Every phrasing of every prompt in every shipped prompt set, lower-cased."""
    from rmtl.reward.prompt_sets import shipped_prompt_sets

    texts = [text for prompt_set in shipped_prompt_sets() for _, text in prompt_set.rows()]
    return tuple(dict.fromkeys(t.lower() for t in texts))


def leaks(caption: str, texts: Sequence[str] | None = None) -> list[str]:
    """The evaluated prompt texts that occur in ``caption`` (ignoring letter case)."""
    low = caption.lower()
    return [t for t in (evaluated_texts() if texts is None else texts) if t in low]


NEAR_PARAPHRASE = 0.6
"""Word-overlap similarity (:func:`similarity`) at or above which a caption counts as a near
paraphrase of an evaluated prompt. A caption that shares 3 of every 5 content words with a prompt
says what the prompt says in nearly its words (e.g. "the robot gripper is lifting the red cube 3 cm
off the table" against the single prompt: 0.78; the baseline prompt behind a caption's "a robot
gripper and a red cube:" prefix with one short fact: 0.83), while captions that only share the scene's nouns stay
below it (0.2-0.4)."""

STOP_WORDS = frozenset({"a", "an", "the", "its", "it", "is", "and", "of", "on", "in", "with", "to", "has", "been"})


def content_words(text: str) -> frozenset[str]:
    """Lower-case words of ``text`` without numbers and :data:`STOP_WORDS`."""
    return frozenset(w for w in re.findall(r"[a-z']+", text.lower()) if w not in STOP_WORDS)


def _jaccard(x: frozenset[str], y: frozenset[str]) -> float:
    return len(x & y) / len(x | y) if x | y else 1.0


def similarity(a: str, b: str) -> float:
    """Jaccard overlap of two texts' content words (0: none shared, 1: the same words)."""
    return _jaccard(content_words(a), content_words(b))


@functools.lru_cache(maxsize=1)
def _evaluated_words() -> tuple[tuple[str, frozenset[str]], ...]:
    """Each evaluated prompt text with its content words (computed once: captioning checks every caption)."""
    return tuple((t, content_words(t)) for t in evaluated_texts())


def near_paraphrases(caption: str, texts: Sequence[str] | None = None,
                     threshold: float = NEAR_PARAPHRASE) -> list[tuple[str, float]]:
    """(prompt, similarity) of every evaluated prompt text ``caption`` nearly paraphrases."""
    against = _evaluated_words() if texts is None else tuple((t, content_words(t)) for t in texts)
    words = content_words(caption)
    sims = ((t, _jaccard(words, tw)) for t, tw in against)
    return [(t, s) for t, s in sims if s >= threshold]


def leak_audit(captions: Sequence[str], threshold: float = NEAR_PARAPHRASE) -> dict:
    """What a model card says of a caption sample: exact leaks (an evaluated prompt inside a caption)
    and near paraphrases (:func:`similarity` >= ``threshold``) over its distinct captions, and the
    closest caption to any evaluated prompt."""
    distinct = list(dict.fromkeys(captions))
    texts = evaluated_texts()
    exact = [(c, t) for c in distinct for t in leaks(c, texts)]
    best = (0.0, "", "")
    near = 0
    for c in distinct:
        words = content_words(c)
        for t, tw in _evaluated_words():
            s = _jaccard(words, tw)
            near += s >= threshold
            if s > best[0]:
                best = (s, c, t)
    return {"captions": len(captions), "distinct": len(distinct), "evaluated_texts": len(texts),
            "threshold": threshold, "exact_leaks": len(exact), "near_paraphrases": int(near),
            "closest": {"similarity": round(best[0], 3), "caption": best[1], "prompt": best[2]},
            "examples": [list(e) for e in exact[:3]]}


def caption(state: np.ndarray, rng: random.Random, max_facts: int = 3, lift_focus: bool = False,
            graded_lift: bool = False) -> str:
    """One compositional caption of a 25-D state (see the module docstring). ``lift_focus``: at the
    gripper (:data:`LIFT_FOCUS_DISTANCE`) the cube's height fact is always stated, in the wordings of
    :func:`_lift_phrase`, and no caption nearly paraphrases an evaluated prompt (:func:`near_paraphrases`).
    ``graded_lift`` (implies ``lift_focus``): that fact grades the height by degree
    (:func:`lift_grade`: resting, just raised, a few centimetres, high), in the wordings of
    :func:`_graded_lift_phrase`."""
    f = Facts.of(state)
    lift_focus = lift_focus or graded_lift
    focus = lift_focus and f.distance <= LIFT_FOCUS_DISTANCE and f.cube in ("resting", "lifted")
    lift_phrase = _graded_lift_phrase if graded_lift else _lift_phrase
    for _ in range(16):
        g, c, t = _pick(rng, GRIPPERS), _pick(rng, CUBES), _pick(rng, TABLES)
        # Always some of the facts that decide the task (how far, the jaws, the cube), then maybe others.
        core = [_distance_phrase(f, g, c, rng), _jaw_phrase(f, g, c, rng), _cube_phrase(f, g, c, t, rng)]
        extra = [p for p in (_direction_phrase(f, g, c, rng), _height_phrase(f, g, c, rng),
                             _between_phrase(f, g, c, rng)) if p]
        if focus:
            chosen = [lift_phrase(f, g, c, t, rng)] + rng.sample(core[:2] + extra, rng.randint(0, max_facts - 1))
        else:
            chosen = rng.sample(core, rng.randint(1, len(core)))
            if extra and len(chosen) < max_facts:
                chosen += rng.sample(extra, min(len(extra), rng.randint(0, max_facts - len(chosen))))
        rng.shuffle(chosen)
        text = ", ".join(chosen)
        if rng.random() < 0.3:
            text = f"{_a(g)} and {_a(c)}: " + text
        if not leaks(text) and not (lift_focus and near_paraphrases(text)):
            return text
    raise RuntimeError(f"no leak-free caption found for state {np.round(state, 3).tolist()}")


LIFT_FOCUS_DISTANCE = 0.04
"""Gripper-cube distance (m) within which a ``lift_focus`` caption always says whether the cube is
off the table: where a resting cube between the jaws and a lifted one look most alike."""


def _lift_phrase(f: Facts, g: str, c: str, t: str, rng: random.Random) -> str:
    """Whether the cube is off the table, said in many words (a lifted and a resting cube at the
    gripper then differ in every caption, not in one fact of three)."""
    lift = _cm(max(f.lift, 0.0), 1)
    if f.cube == "lifted":
        return _pick(rng, (f"the {c} is off the {t}, {lift} cm up, with air below it",
                           f"there is a {lift} cm gap under the {c}", f"the {c} hangs {lift} cm over the {t}",
                           f"the {c} no longer touches the {t}", f"the {g} carries the {c} up, {lift} cm high",
                           f"the {c} has left the {t} and is raised {lift} cm",
                           f"the {c} is up in the air, {lift} cm clear of the {t}"))
    return _pick(rng, (f"the {c} is still down on the {t}", f"the {c} has not left the {t}",
                       f"the {c} sits on the {t} with no gap below it", f"the {c} stays flat on the {t}, 0 cm up",
                       f"the {c} touches the {t}, not raised at all", f"the {c} is on the {t}, not in the air"))


LIFT_GRADES = (("resting", 0.003), ("just raised", 0.01), ("a few centimetres", 0.03), ("high", np.inf))
"""The graded lift's grades, each with the height (m above rest) it lasts up to: a resting cube reads
0.000002 m, the success lift is 0.02 m. A cube raised 3 mm to 1.5 cm was "still down on the table"
in the lift-focused captions (their lifted threshold is :data:`LIFTED`), so the first centimetre of a
lift was taught as resting."""


def lift_grade(lift: float) -> str:
    """The grade of a cube height above rest (m), one of :data:`LIFT_GRADES`."""
    return next(name for name, upto in LIFT_GRADES if lift < upto)


def _graded_lift_phrase(f: Facts, g: str, c: str, t: str, rng: random.Random) -> str:
    """The cube's height at the gripper by degree, in many words; the millimetres or centimetres are
    named, so neighbouring heights get neighbouring captions."""
    lift = max(f.lift, 0.0)
    mm, cm = int(round(lift * 1000)), _cm(lift, 1)
    options = {
        "resting": (f"the {c} is still down on the {t}", f"the {c} has not left the {t}",
                    f"the {c} sits on the {t} with no gap below it", f"the {c} touches the {t}, not raised at all",
                    f"the {c} is on the {t}, 0 mm up", f"no light shows under the {c}"),
        "just raised": (f"the {c} is barely off the {t}, {mm} mm up", f"a thin {mm} mm gap shows under the {c}",
                        f"the {c} has just come off the {t}", f"the {c} is raised a few millimetres, {mm} mm",
                        f"the {g} has just begun to raise the {c}, {mm} mm clear",
                        f"the {c} no longer touches the {t}, only just"),
        "a few centimetres": (f"the {c} is {cm} cm off the {t}", f"there is a {cm} cm gap under the {c}",
                              f"the {c} hangs a few centimetres over the {t}, {cm} cm",
                              f"the {g} carries the {c} {cm} cm up", f"the {c} is up in the air, {cm} cm clear"),
        "high": (f"the {c} is high above the {t}, {cm} cm up", f"the {g} holds the {c} well up, {cm} cm high",
                 f"the {c} is raised far off the {t}, {cm} cm", f"a wide {cm} cm gap under the {c}",
                 f"the {c} is lifted high in the air"),
    }
    return _pick(rng, options[lift_grade(lift)])


def sample_captions(states: np.ndarray, rng: np.random.Generator, lift_focus: bool = False,
                    graded_lift: bool = False) -> list[str]:
    """One prompt-neutral caption per state ([N, 25]); ``rng`` seeds the wording; ``lift_focus`` and
    ``graded_lift`` as in :func:`caption`."""
    r = random.Random(int(rng.integers(2**63)))
    return [caption(s, r, lift_focus=lift_focus, graded_lift=graded_lift)
            for s in np.atleast_2d(np.asarray(states, dtype=np.float64))]

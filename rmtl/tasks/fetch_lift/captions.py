"""Captions written from simulator state, for training a domain VLM.

The state is used only here, to write training captions; at reward time the model sees
only pixels and the prompt. Two caption modes (``CaptionConfig.mode``):

- ``graded`` (the shipped model's recipe): each situation has several paraphrases, and
  the paper's exact micro-task prompts (App. A) are among the paraphrases of the
  situations they describe, with progress-graded prompt captions and the baseline prompt
  mixed in (below), so the trained model knows the words the reward will use;
- ``neutral`` (the prompt-neutral stand-in): descriptive captions from state only that
  contain none of the evaluated prompt texts (:func:`evaluated_prompt_texts`: baseline,
  approach, align, grasp and the single prompt), not even as a substring in any letter
  case; no baseline captions, no graded prompt captions. A comparison of prompt sets is
  then not decided by which prompts the reward model was trained on;
- ``compositional`` (the prompt-neutral stand-in's recipe): prompt-neutral too, but rich
  and varied: several facts of the state (distance and direction, height, jaws, the cube
  between the fingers, lifted, tipped, sliding) in many wordings
  (:mod:`rmtl.tasks.fetch_lift.neutral_captions`);
- ``compositional_lift``: ``compositional``, and at the gripper every caption says whether the
  cube is off the table, in many words, and none nearly paraphrases an evaluated prompt
  (word overlap below ``neutral_captions.NEAR_PARAPHRASE``);
- ``compositional_graded_lift``: ``compositional_lift``, with the height graded by degree (resting,
  just raised, a few centimetres, high: ``neutral_captions.LIFT_GRADES``) instead of on or off.

Situations, checked in this order (distances in metres, from the 25-D state):

| situation  | condition                                                          | paper prompt |
| ---------- | ------------------------------------------------------------------ | ------------ |
| lifting    | cube >= 0.02 above rest and gripper within 0.03 of it              | grasp        |
| pinching   | gripper within 0.02 of the cube, fingers closed on it (sum < 0.055)| align        |
| around     | gripper within 0.02 of the cube, jaws open                         |              |
| above      | within 0.02 in xy, 0.02-0.08 above the cube, jaws open (sum > 0.07)| approach     |
| near       | within 0.15 (the rule's align bin)                                 |              |
| far        | within 0.35                                                        |              |
| very_far   | farther                                                            |              |

Near and far states also get captions that name the distance in centimetres (rounded to
5 cm), which orders them by distance.

Progress-graded prompt captions: a state that is not yet in a micro-task's target
situation is captioned with that micro-task's paper prompt with a probability that falls
exponentially with the gripper-cube distance, ``rate * exp(-d / scale)`` (approach: scale
0.15 m over near, far and very far states outside the rule's grasp bin, d > 0.04 m;
align: 0.05 m over near and around states, and with band 'full' also over 'above'
states, the approach target, which lies in the align phase). States at the cube are
never captioned with the approach prompt: they look like pinching and lifting states, on
which the align and grasp prompts must win (a first version that graded approach over
them too made the approach prompt win on pinching states).
Contrastive training learns image-text similarity close to the log-probability of the
caption given the image, so the prompt's score then falls about linearly with distance
over the whole phase instead of being flat outside the target situation: the graded,
within-phase signal a dense reward needs. ``rate = 0`` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from rmtl.reward.prompts import PromptConfig
from rmtl.tasks.fetch_lift.phases import ALIGN_MAX_DISTANCE, GRASP_MAX_DISTANCE, MICRO_TASKS
from rmtl.tasks.fetch_lift.state import CUBE_REL_POS, FINGER_WIDTHS, lift_height

APPROACH_PROMPT, ALIGN_PROMPT, GRASP_PROMPT = (MICRO_TASKS.goals[n][0] for n in ("approach", "align", "grasp"))
BASELINE_PROMPT = MICRO_TASKS.baseline[0]

SITUATIONS: dict[str, tuple[str, ...]] = {
    "lifting": (
        GRASP_PROMPT,
        "a robot gripper holding a red cube up in the air",
        "the gripper has lifted the red cube off the table",
    ),
    "pinching": (
        ALIGN_PROMPT,
        "a robot gripper with closed fingers gripping a red cube on the table",
        "two fingers squeezing a red cube resting on a table",
    ),
    "around": (
        "an open robot gripper with its fingers around a red cube",
        "open gripper jaws surrounding a red cube on a table",
    ),
    "above": (
        APPROACH_PROMPT,
        "an open robot gripper right above a red cube",
        "open gripper jaws directly over a red cube",
    ),
    "near": (
        "a robot gripper close to a red cube on a table",
        "a robot gripper next to a red cube",
    ),
    "far": (
        "a robot gripper far from a red cube on a table",
        "a red cube on a table and a robot gripper some distance away",
    ),
    "very_far": (
        "a robot gripper very far from a red cube on a table",
        "a red cube on a table with the robot gripper far away",
    ),
}
SITUATION_NAMES: tuple[str, ...] = tuple(SITUATIONS)

NEUTRAL_SITUATIONS: dict[str, tuple[str, ...]] = {
    situation: tuple(c for c in captions if c not in (APPROACH_PROMPT, ALIGN_PROMPT, GRASP_PROMPT))
    for situation, captions in SITUATIONS.items()
}
"""The situations' paraphrases without the paper prompts (the captions of the neutral mode)."""
NEUTRAL_SITUATIONS["lifting"] += ("a red cube raised above the table in a closed robot gripper",)
NEUTRAL_SITUATIONS["pinching"] += ("closed gripper fingers on both sides of a red cube on the table",)
NEUTRAL_SITUATIONS["above"] += ("an open gripper hovering a few centimetres over a red cube",)

PROMPT_SITUATION = {"approach": "above", "align": "pinching", "grasp": "lifting"}
"""The situation each micro-task prompt describes (its target state)."""

BASELINE_RATE = 0.1
"""Fraction of training captions replaced by the paper's neutral baseline prompt."""

GRADED_BANDS: dict[str, dict[str, tuple[tuple[str, ...], float, float]]] = {
    "wide": {"approach": (("near", "far", "very_far"), GRASP_MAX_DISTANCE, np.inf),
             "align": (("around", "near"), 0.0, np.inf)},
    "full": {"approach": (("near", "far", "very_far"), GRASP_MAX_DISTANCE, np.inf),
             "align": (("above", "around", "near"), 0.0, np.inf)},
    "phase": {"approach": (("near", "far", "very_far"), ALIGN_MAX_DISTANCE, np.inf),
              "align": (("around", "near"), GRASP_MAX_DISTANCE, ALIGN_MAX_DISTANCE)},
}
"""Where graded prompts may caption: per prompt, the situations and the distance range
(m). 'wide': the approach prompt outside the grasp bin, the align prompt on near and
around states. 'full': as wide, and the align prompt also on 'above' states (the
approach target, which lies in the align phase: without it the align caption rate is not
monotone in distance over that phase). 'phase': each prompt only within its own rule
phase's distance bin."""

CAPTION_MODES = ("graded", "neutral", "compositional", "compositional_lift", "compositional_graded_lift")
PROMPT_NEUTRAL_MODES = ("neutral", "compositional", "compositional_lift", "compositional_graded_lift")
"""Caption modes whose text contains no evaluated prompt."""

GRADED_PROMPT_RATE = 0.3
"""Probability of a graded prompt caption at distance 0 (see the module docstring)."""


@dataclass(frozen=True)
class CaptionConfig:
    """How training captions are sampled; the defaults are the shipped model's recipe."""

    graded_rates: tuple[float, float] = (GRADED_PROMPT_RATE, GRADED_PROMPT_RATE)
    """Peak probability (at distance 0) of a graded approach / align prompt caption; 0: off."""
    graded_scales: tuple[float, float] = (0.15, 0.03)
    """Distance (m) over which the approach / align caption probability falls by a factor e."""
    graded_band: str = "full"
    """Which states graded prompts may caption (a key of GRADED_BANDS)."""
    target_prompt_rate: float | None = 1.0
    """Probability that a target situation is captioned with its paper prompt rather than
    another paraphrase (None: uniform over the situation's paraphrases)."""
    mode: str = "graded"
    """'graded': the recipe above; 'neutral': captions free of every evaluated prompt text
    (the graded, target and baseline settings do not apply)."""

    def __post_init__(self) -> None:
        if self.mode not in CAPTION_MODES:
            raise ValueError(f"caption mode {self.mode!r} is not one of {', '.join(CAPTION_MODES)}")
        if self.graded_band not in GRADED_BANDS:
            raise ValueError(f"graded_band {self.graded_band!r} is not one of {sorted(GRADED_BANDS)}")
        if min(self.graded_scales) <= 0:
            raise ValueError(f"graded_scales must be positive distances in metres, got {self.graded_scales}")


def graded_prompt_probabilities(states: np.ndarray, captions: CaptionConfig = CaptionConfig()) -> np.ndarray:
    """[N, 2] probability of captioning each state with the approach / align paper prompt."""
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    return _graded(situation_ids(s), np.linalg.norm(s[:, CUBE_REL_POS], axis=1), captions)


def _graded(sit: np.ndarray, dist: np.ndarray, captions: CaptionConfig) -> np.ndarray:
    out = np.zeros((len(sit), 2))
    for j, name in enumerate(("approach", "align")):
        situations, low, high = GRADED_BANDS[captions.graded_band][name]
        eligible = np.isin(sit, [SITUATION_NAMES.index(x) for x in situations]) & (dist > low) & (dist <= high)
        out[:, j] = np.where(eligible, captions.graded_rates[j] * np.exp(-dist / captions.graded_scales[j]), 0.0)
    return out


def situation_ids(states: np.ndarray) -> np.ndarray:
    """Situation index (into SITUATION_NAMES) of each 25-D state: [N, 25] -> int64 [N]."""
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    rel = s[:, CUBE_REL_POS]  # cube - gripper
    dist = np.linalg.norm(rel, axis=1)
    xy = np.linalg.norm(rel[:, :2], axis=1)
    above_by = -rel[:, 2]  # gripper height above the cube centre
    fingers = s[:, FINGER_WIDTHS].sum(axis=1)
    lift = np.asarray(lift_height(s))
    conditions = [
        (lift >= 0.02) & (dist <= 0.03),
        (dist <= 0.02) & (fingers < 0.055),
        dist <= 0.02,
        (xy <= 0.02) & (above_by > 0.02) & (above_by <= 0.08) & (fingers > 0.07),
        dist <= 0.15,
        dist <= 0.35,
    ]
    out = np.full(len(s), len(SITUATION_NAMES) - 1, dtype=np.int64)
    for idx in reversed(range(len(conditions))):
        out = np.where(conditions[idx], idx, out)
    return out


_TARGET_PROMPTS = {situation: SITUATIONS[situation][0] for situation in PROMPT_SITUATION.values()}
"""Target situation -> its paper prompt (the first paraphrase)."""


DISTANCE_CAPTION_RATE = 0.45
"""Fraction of near, far and very far states captioned with their distance (both modes)."""


def distance_caption(distance_m: float) -> str:
    cm = int(5 * round(distance_m * 100 / 5))
    return f"a robot gripper about {cm} centimetres from a red cube"


def evaluated_prompt_texts(prompts: PromptConfig | None = None) -> tuple[str, ...]:
    """Every phrasing of every prompt a reward is evaluated with: baseline, approach, align,
    grasp and the single prompt (``prompts`` as configured; what they leave unset is the paper's)."""
    p = PromptConfig.for_micro_tasks(MICRO_TASKS, prompts)
    return tuple(dict.fromkeys(t for role in ("baseline", *p.goal_names, "single") for t in p.texts(role)))


def neutral_vocabulary(max_distance_m: float = 3.0) -> tuple[str, ...]:
    """Every caption the neutral mode can write (distance captions up to ``max_distance_m``)."""
    distances = {distance_caption(d / 100) for d in range(0, int(max_distance_m * 100) + 1)}
    return tuple(dict.fromkeys([c for caps in NEUTRAL_SITUATIONS.values() for c in caps] + sorted(distances)))


def prompt_leaks(captions: Sequence[str], prompts: Sequence[str]) -> list[tuple[str, str]]:
    """(caption, prompt) pairs where a prompt text occurs in a caption, ignoring letter case."""
    low = [p.lower() for p in prompts]
    return [(c, p) for c in dict.fromkeys(captions) for p, q in zip(prompts, low) if q in c.lower()]


def sample_captions(states: np.ndarray, rng: np.random.Generator, captions: CaptionConfig = CaptionConfig()) -> list[str]:
    """One training caption per state: a random paraphrase of its situation, sometimes a
    progress-graded prompt, a distance caption (near/far states) or the neutral baseline
    (graded mode); a paraphrase or a distance caption only (neutral mode)."""
    s = np.atleast_2d(np.asarray(states, dtype=np.float64))
    sit = situation_ids(s)
    dist = np.linalg.norm(s[:, CUBE_REL_POS], axis=1)
    if captions.mode == "neutral":
        return _neutral_captions(sit, dist, rng)
    if captions.mode.startswith("compositional"):
        from rmtl.tasks.fetch_lift.neutral_captions import sample_captions as compositional

        return compositional(s, rng, lift_focus=captions.mode == "compositional_lift",
                             graded_lift=captions.mode == "compositional_graded_lift")
    graded = _graded(sit, dist, captions)
    target_rate = captions.target_prompt_rate
    out = []
    for i, k in enumerate(sit):
        name = SITUATION_NAMES[k]
        r, g = rng.random(), rng.random()
        if r < BASELINE_RATE:
            out.append(BASELINE_PROMPT)
        elif g < graded[i, 0]:
            out.append(APPROACH_PROMPT)
        elif g < graded[i, 0] + graded[i, 1]:
            out.append(ALIGN_PROMPT)
        elif name in ("near", "far", "very_far") and r < BASELINE_RATE + DISTANCE_CAPTION_RATE:
            out.append(distance_caption(dist[i]))
        elif target_rate is not None and name in _TARGET_PROMPTS:
            others = SITUATIONS[name][1:]
            out.append(_TARGET_PROMPTS[name] if rng.random() < target_rate else others[rng.integers(len(others))])
        else:
            choices = SITUATIONS[name]
            out.append(choices[rng.integers(len(choices))])
    return out


def _neutral_captions(sit: np.ndarray, dist: np.ndarray, rng: np.random.Generator) -> list[str]:
    out = []
    for i, k in enumerate(sit):
        name = SITUATION_NAMES[k]
        if name in ("near", "far", "very_far") and rng.random() < DISTANCE_CAPTION_RATE:
            out.append(distance_caption(dist[i]))
        else:
            choices = NEUTRAL_SITUATIONS[name]
            out.append(choices[rng.integers(len(choices))])
    return out

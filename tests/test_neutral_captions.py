"""The prompt-neutral stand-in's captions: never an evaluated prompt, and true to the state."""

import random

import numpy as np
import pytest

from rmtl.tasks.fetch_lift.state import CUBE_POS, CUBE_REL_POS, CUBE_REST_HEIGHT, CUBE_ROT, CUBE_VELP, FINGER_WIDTHS
from rmtl.reward.prompt_sets import shipped_prompt_sets
from rmtl.tasks.fetch_lift.captions import CaptionConfig, sample_captions as sample_mode
from rmtl.tasks.fetch_lift.neutral_captions import Facts, caption, evaluated_texts, leaks, sample_captions


def _state(rel=(0.0, 0.0, 0.0), fingers=0.08, lift=0.0, tilt=0.0, speed=0.0):
    s = np.zeros(25)
    s[CUBE_REL_POS] = rel
    s[FINGER_WIDTHS] = fingers / 2
    s[CUBE_POS] = (1.3, 0.75, CUBE_REST_HEIGHT + lift)
    s[CUBE_ROT] = (tilt, 0.0, 0.3)
    s[CUBE_VELP] = (speed, 0.0, 0.0)
    return s


def _random_states(n, seed=0):
    rng = np.random.default_rng(seed)
    s = np.zeros((n, 25))
    # Half near the cube (where the prompts' situations are), half anywhere on the table.
    near = rng.random(n) < 0.5
    s[:, CUBE_REL_POS] = np.where(near[:, None], rng.normal(0, 0.03, (n, 3)), rng.uniform(-0.5, 0.5, (n, 3)))
    s[:, FINGER_WIDTHS] = rng.uniform(0, 0.05, (n, 1)) * np.ones((1, 2))
    s[:, CUBE_POS] = np.c_[rng.uniform(1.1, 1.5, n), rng.uniform(0.5, 1.0, n),
                           CUBE_REST_HEIGHT + np.where(rng.random(n) < 0.3, rng.uniform(0, 0.2, n), 0)]
    s[:, CUBE_ROT] = np.where(rng.random((n, 1)) < 0.1, rng.uniform(-1.5, 1.5, (n, 3)), 0)
    s[:, CUBE_VELP] = np.where(rng.random((n, 1)) < 0.1, rng.normal(0, 0.3, (n, 3)), 0)
    return s


def test_evaluated_texts_are_every_phrasing_of_every_shipped_prompt_set():
    texts = set(evaluated_texts())
    for prompt_set in shipped_prompt_sets():
        for _, text in prompt_set.rows():
            assert text.lower() in texts
    # the paper's four prompts and the single prompt among them
    assert "a robot gripper pinching a red cube between two fingers" in texts
    assert "a robot gripper grasping a red cube and lifting it off the table" in texts


def test_no_caption_contains_an_evaluated_prompt_text_in_any_letter_case():
    states = _random_states(6000)
    caps = sample_captions(states, np.random.default_rng(1))
    assert len(caps) == len(states) and len(set(caps)) > 3000  # rich and varied, not a few templates
    low = [c.lower() for c in caps]
    for text in evaluated_texts():
        assert not any(text in c for c in low), text
    # The same through the training path's caption mode.
    caps = sample_mode(states[:500], np.random.default_rng(2), CaptionConfig(mode="compositional"))
    assert not [c for c in caps if leaks(c)]


def test_the_leak_check_finds_a_prompt_inside_a_caption():
    prompt = shipped_prompt_sets()[0].prompts.goal("grasp")[0]
    assert leaks("foo, " + prompt.upper() + ", bar") == [prompt.lower()]
    assert leaks("the gripper is lifting the red cube 6 cm off the table") == []


def test_the_prompts_words_occur_in_other_combinations():
    words = " ".join(sample_captions(_random_states(4000, seed=3), np.random.default_rng(4))).lower()
    for word in ("gripper", "red cube", "open", "jaws", "between", "fingers", "lifting", "above", "centred", "table"):
        assert word in words, word


@pytest.mark.parametrize("state, facts, words", [
    (_state(rel=(0.3, 0.2, -0.1)), {"jaws": "open", "cube": "resting"}, ("open", "rests|sits flat|still on")),
    (_state(rel=(0.0, 0.0, -0.06), fingers=0.09), {"jaws": "open"}, ("open",)),
    (_state(fingers=0.05), {"jaws": "on_cube", "between": True}, ("clamped|squeezing|hold",)),
    (_state(fingers=0.05, lift=0.07), {"cube": "lifted"}, ("7 cm|raised|lifting|in the air",)),
    (_state(rel=(0.1, 0.0, 0.0), fingers=0.0), {"jaws": "closed"}, ("nothing|empty|shut",)),
    (_state(rel=(0.2, 0.0, 0.0), tilt=1.0), {"cube": "tipped"}, ("tipped|tilted|knocked",)),
    (_state(rel=(0.2, 0.0, 0.0), speed=0.4), {"cube": "sliding"}, ("sliding|pushed",)),
])
def test_captions_say_what_the_state_shows(state, facts, words):
    import re

    f = Facts.of(state)
    for name, value in facts.items():
        assert getattr(f, name) == value, (name, getattr(f, name))
    caps = [caption(state, random.Random(i)) for i in range(200)]
    for pattern in words:
        assert sum(bool(re.search(pattern, c)) for c in caps) > 40, (pattern, caps[:5])
    if f.cube != "lifted":
        assert not [c for c in caps if re.search(r"raised|in the air|lifting the", c)]
    if f.jaws != "open":
        assert not [c for c in caps if "wide open" in c or "spread open" in c]


def test_captions_are_reproducible_from_the_seed():
    states = _random_states(50)
    assert sample_captions(states, np.random.default_rng(7)) == sample_captions(states, np.random.default_rng(7))
    assert sample_captions(states, np.random.default_rng(7)) != sample_captions(states, np.random.default_rng(8))


def test_near_paraphrases_are_found_by_word_overlap():
    from rmtl.tasks.fetch_lift.neutral_captions import NEAR_PARAPHRASE, near_paraphrases, similarity

    single = "a robot gripper grasping a red cube and lifting it off the table"
    close = "the robot gripper is lifting the red cube 3 cm off the table"
    assert similarity(close, single) >= NEAR_PARAPHRASE and not leaks(close)  # no exact leak, still a paraphrase
    assert single in [t for t, _ in near_paraphrases(close)]
    assert near_paraphrases("the gripper is 30 cm from the red block, its fingers are closed and empty") == []


def test_the_leak_audit_counts_exact_leaks_and_near_paraphrases():
    from rmtl.tasks.fetch_lift.neutral_captions import leak_audit

    prompt = shipped_prompt_sets()[0].prompts.goal("grasp")[0]
    audit = leak_audit(["far away, " + prompt, "the robot gripper is lifting the red cube 3 cm off the table",
                        "the gripper is 30 cm from the red block"])
    assert audit["exact_leaks"] == 1 and audit["near_paraphrases"] >= 2 and audit["distinct"] == 3
    assert audit["closest"]["similarity"] >= 0.75


def test_lift_focused_captions_state_the_lift_at_the_gripper_and_paraphrase_no_prompt():
    import re

    from rmtl.tasks.fetch_lift.neutral_captions import leak_audit

    resting, lifted = _state(fingers=0.05), _state(fingers=0.05, lift=0.03)
    up = r"is off the|gap under|air below|hangs|no longer touches|carries|has left the|up in the air"
    down = r"still down|not left|no gap|flat on|not raised|not in the air"
    rest_caps = [caption(resting, random.Random(i), lift_focus=True) for i in range(200)]
    lift_caps = [caption(lifted, random.Random(i), lift_focus=True) for i in range(200)]
    assert all(re.search(down, c) for c in rest_caps) and not any(re.search(up, c) for c in rest_caps)
    assert all(re.search(up, c) for c in lift_caps)
    # Without the focus the lift is one optional fact (the diagnosis of round 6's grasp score).
    plain = [caption(lifted, random.Random(i)) for i in range(200)]
    assert sum(bool(re.search(r"raised|in the air|lifting|above the|off the|picked", c)) for c in plain) < 180
    audit = leak_audit(sample_captions(_random_states(3000), np.random.default_rng(0), lift_focus=True))
    assert audit["exact_leaks"] == 0 and audit["near_paraphrases"] == 0
    caps = sample_mode(_random_states(200), np.random.default_rng(1), CaptionConfig(mode="compositional_lift"))
    assert len(caps) == 200 and not [c for c in caps if leaks(c)]


def test_graded_lift_captions_grade_the_height_by_degree_and_paraphrase_no_prompt():
    """Round 8's captions: at the gripper the cube's height is said by degree; a cube raised 5 mm is
    never "still down on the table" (the lift-focused captions called it that below 1.5 cm)."""
    import re

    from rmtl.tasks.fetch_lift.neutral_captions import LIFT_GRADES, leak_audit, lift_grade

    assert [lift_grade(h) for h in (0.0, 0.002, 0.005, 0.012, 0.025, 0.08)] == [
        "resting", "resting", "just raised", "a few centimetres", "a few centimetres", "high"]
    assert [name for name, _ in LIFT_GRADES] == ["resting", "just raised", "a few centimetres", "high"]
    down = r"still down|not left|no gap below|not raised|0 mm up|no light shows"
    for lift, pattern in ((0.0, down), (0.005, r"barely|thin|just|few millimetres|only just"),
                          (0.02, r"cm off|cm gap|few centimetres|cm up|cm clear"), (0.08, r"high|well up|far off|wide")):
        caps = [caption(_state(fingers=0.05, lift=lift), random.Random(i), graded_lift=True) for i in range(200)]
        assert all(re.search(pattern, c) for c in caps), (lift, [c for c in caps if not re.search(pattern, c)][:3])
        if lift > 0:
            assert not any(re.search(down, c) for c in caps), lift
    # the lift-focused captions (round 7) call a 5 mm lift resting: the defect the grades remove
    assert all(re.search(down + r"|flat on|not in the air",
                         caption(_state(fingers=0.05, lift=0.005), random.Random(i), lift_focus=True)) for i in range(50))
    states = _random_states(3000)
    small = np.random.default_rng(2).random(3000) < 0.3  # many small lifts near the gripper
    states[small, CUBE_POS.start + 2] = CUBE_REST_HEIGHT + np.random.default_rng(3).uniform(0, 0.03, small.sum())
    audit = leak_audit(sample_captions(states, np.random.default_rng(0), graded_lift=True))
    assert audit["exact_leaks"] == 0 and audit["near_paraphrases"] == 0
    caps = sample_mode(states[:200], np.random.default_rng(1), CaptionConfig(mode="compositional_graded_lift"))
    assert len(caps) == 200 and not [c for c in caps if leaks(c)]

import numpy as np

from rmtl.env.state import CUBE_REST_HEIGHT, STATE_DIM
from rmtl.reward.prompts import PromptConfig
from rmtl.vlm.captions import (
    PROMPT_SITUATION,
    SITUATION_NAMES,
    SITUATIONS,
    graded_prompt_probabilities,
    sample_captions,
    situation_ids,
)


def make_state(rel, fingers=0.05, lift=0.0):
    s = np.zeros(STATE_DIM, np.float32)
    cube = np.array([1.3, 0.75, CUBE_REST_HEIGHT + lift])
    s[3:6] = cube
    s[0:3] = cube - np.asarray(rel)
    s[6:9] = rel
    s[9:11] = fingers
    return s


def name_of(state):
    return SITUATION_NAMES[situation_ids(state[None])[0]]


def test_situations_from_geometry():
    assert name_of(make_state([0, 0, 0.005], fingers=0.024, lift=0.05)) == "lifting"
    assert name_of(make_state([0, 0, 0.005], fingers=0.024)) == "pinching"
    assert name_of(make_state([0, 0, 0.005], fingers=0.05)) == "around"
    assert name_of(make_state([0, 0, -0.05], fingers=0.05)) == "above"
    assert name_of(make_state([0.1, 0, -0.05])) == "near"
    assert name_of(make_state([0.3, 0, 0])) == "far"
    assert name_of(make_state([0.5, 0.2, 0])) == "very_far"


def test_paper_prompts_caption_their_target_situations():
    paper = PromptConfig()
    for phase, situation in PROMPT_SITUATION.items():
        assert getattr(paper, phase)[0] in SITUATIONS[situation]


def test_sampled_captions_are_from_the_situation_or_distance_or_baseline():
    rng = np.random.default_rng(0)
    states = np.stack([make_state([0.3, 0, 0])] * 200)
    caps = sample_captions(states, rng, graded_rate=0.0)
    allowed = set(SITUATIONS["far"]) | {PromptConfig().baseline[0], "a robot gripper about 30 centimetres from a red cube"}
    assert set(caps) <= allowed and len(set(caps)) == len(allowed)


def test_graded_prompt_captions_fall_with_distance_and_spare_target_states():
    far = np.stack([make_state([d, 0, 0]) for d in (0.2, 0.3, 0.5)])
    p = graded_prompt_probabilities(far)
    assert np.all(np.diff(p[:, 0]) < 0) and np.all(p[:, 1] == 0)  # align only near the cube
    near = np.stack([make_state([d, 0, 0]) for d in (0.06, 0.1, 0.14)])
    q = graded_prompt_probabilities(near)
    assert np.all(np.diff(q[:, 1]) < 0) and np.all(q[:, 0] > q[:, 1])
    targets = np.stack([make_state([0, 0, -0.05]), make_state([0, 0, 0.005], fingers=0.024),
                        make_state([0, 0, 0.005], fingers=0.024, lift=0.05)])
    assert np.all(graded_prompt_probabilities(targets) == 0)
    at_cube = np.stack([make_state([0.03, 0, 0]), make_state([0, 0, 0.005], fingers=0.05)])  # near, around
    assert np.all(graded_prompt_probabilities(at_cube)[:, 0] == 0)  # they look like pinching: no approach
    assert np.all(graded_prompt_probabilities(at_cube)[:, 1] > 0)
    assert np.all(graded_prompt_probabilities(far, rate=0.0) == 0)


def test_sampled_graded_prompt_frequency_matches_its_probability():
    rng = np.random.default_rng(1)
    state = make_state([0.2, 0, 0])
    caps = sample_captions(np.stack([state] * 4000), rng)
    expected = (1 - 0.1) * graded_prompt_probabilities(state[None])[0, 0]
    got = np.mean([c == PromptConfig().approach[0] for c in caps])
    assert abs(got - expected) < 0.02

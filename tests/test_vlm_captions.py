import numpy as np

from rmtl.tasks.fetch_lift.captions import (
    PROMPT_SITUATION,
    CaptionConfig,
    SITUATION_NAMES,
    SITUATIONS,
    graded_prompt_probabilities,
    sample_captions,
    situation_ids,
)
from rmtl.tasks.fetch_lift.state import CUBE_REST_HEIGHT, STATE_DIM
from rmtl.tasks import get_task


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
    paper = get_task().prompts()
    for phase, situation in PROMPT_SITUATION.items():
        assert paper.goal(phase)[0] in SITUATIONS[situation]


def test_sampled_captions_are_from_the_situation_or_distance_or_baseline():
    rng = np.random.default_rng(0)
    states = np.stack([make_state([0.3, 0, 0])] * 200)
    caps = sample_captions(states, rng, CaptionConfig(graded_rates=(0.0, 0.0)))
    allowed = set(SITUATIONS["far"]) | {get_task().prompts().baseline[0], "a robot gripper about 30 centimetres from a red cube"}
    assert set(caps) <= allowed and len(set(caps)) == len(allowed)


def test_graded_prompt_captions_fall_with_distance_and_spare_target_states():
    wide = CaptionConfig(graded_band="wide", graded_scales=(0.15, 0.05))
    far = np.stack([make_state([d, 0, 0]) for d in (0.2, 0.3, 0.5)])
    p = graded_prompt_probabilities(far, wide)
    assert np.all(np.diff(p[:, 0]) < 0) and np.all(p[:, 1] == 0)  # align only near the cube
    near = np.stack([make_state([d, 0, 0]) for d in (0.06, 0.1, 0.14)])
    q = graded_prompt_probabilities(near, wide)
    assert np.all(np.diff(q[:, 1]) < 0) and np.all(q[:, 0] > q[:, 1])
    targets = np.stack([make_state([0, 0, -0.05]), make_state([0, 0, 0.005], fingers=0.024),
                        make_state([0, 0, 0.005], fingers=0.024, lift=0.05)])
    assert np.all(graded_prompt_probabilities(targets, wide) == 0)
    assert np.all(graded_prompt_probabilities(targets)[:, 0] == 0)  # any band: no approach prompt on targets
    at_cube = np.stack([make_state([0.03, 0, 0]), make_state([0, 0, 0.005], fingers=0.05)])  # near, around
    assert np.all(graded_prompt_probabilities(at_cube)[:, 0] == 0)  # they look like pinching: no approach
    assert np.all(graded_prompt_probabilities(at_cube)[:, 1] > 0)
    assert np.all(graded_prompt_probabilities(far, CaptionConfig(graded_rates=(0.0, 0.0))) == 0)


def test_sampled_graded_prompt_frequency_matches_its_probability():
    rng = np.random.default_rng(1)
    state = make_state([0.2, 0, 0])
    caps = sample_captions(np.stack([state] * 4000), rng)
    expected = (1 - 0.1) * graded_prompt_probabilities(state[None])[0, 0]
    got = np.mean([c == get_task().prompts().goal("approach")[0] for c in caps])
    assert abs(got - expected) < 0.02


def test_full_band_grades_the_align_prompt_over_the_approach_target_too():
    above = make_state([0, 0, -0.05])  # the approach target, 5 cm from the cube: in the align phase
    assert graded_prompt_probabilities(above[None], CaptionConfig(graded_band="wide"))[0, 1] == 0
    p = graded_prompt_probabilities(above[None], CaptionConfig(graded_band="full"))[0]
    assert p[0] == 0 and p[1] > 0  # never the approach prompt as a graded caption
    nearer, farther = make_state([0, 0, -0.03]), make_state([0.1, 0, -0.05])
    q = graded_prompt_probabilities(np.stack([nearer, above, farther]), CaptionConfig(graded_band="full"))[:, 1]
    assert q[0] > q[1] > q[2]  # monotone in distance across above and near states


def test_target_prompt_rate_sets_the_paper_prompt_share_on_target_states():
    rng = np.random.default_rng(2)
    paper = get_task().prompts()
    lifting = np.stack([make_state([0, 0, 0.005], fingers=0.024, lift=0.05)] * 4000)
    for rate in (0.2, 0.8):
        caps = sample_captions(lifting, rng, CaptionConfig(target_prompt_rate=rate))
        got = np.mean([c == paper.goal("grasp")[0] for c in caps])
        assert abs(got - (1 - 0.1) * rate) < 0.025
        assert set(caps) <= set(SITUATIONS["lifting"]) | {paper.baseline[0]}
    uniform = np.mean([c == paper.goal("grasp")[0] for c in sample_captions(lifting, rng, CaptionConfig(target_prompt_rate=None))])
    assert abs(uniform - 0.9 / len(SITUATIONS["lifting"])) < 0.025


def test_caption_config_rejects_an_unknown_band_and_non_positive_scales():
    import pytest

    with pytest.raises(ValueError, match="graded_band 'narrow'"):
        CaptionConfig(graded_band="narrow")
    with pytest.raises(ValueError, match="positive distances"):
        CaptionConfig(graded_scales=(0.15, 0.0))


def test_a_shorter_graded_scale_falls_faster_with_distance():
    near = np.stack([make_state([d, 0, 0]) for d in (0.06, 0.12)])
    wide = graded_prompt_probabilities(near, CaptionConfig(graded_scales=(0.15, 0.05)))[:, 1]
    sharp = graded_prompt_probabilities(near, CaptionConfig(graded_scales=(0.15, 0.03)))[:, 1]
    assert sharp[1] / sharp[0] < wide[1] / wide[0]
    np.testing.assert_allclose(sharp[1] / sharp[0], np.exp(-0.06 / 0.03), rtol=1e-6)


def _own_leaks(captions, prompts):
    """Independent of rmtl.tasks.fetch_lift.captions.prompt_leaks: exact matches and case-insensitive substrings."""
    exact = set(captions) & set(prompts)
    sub = {(c, p) for c in set(captions) for p in prompts if p.lower() in c.lower()}
    return exact, sub


def test_neutral_training_captions_contain_none_of_the_evaluated_prompt_texts():
    from rmtl.tasks.fetch_lift.captions import evaluated_prompt_texts, neutral_vocabulary, prompt_leaks

    paper = get_task().prompts()
    prompts = evaluated_prompt_texts()
    assert set(prompts) == {paper.baseline[0], paper.goal("approach")[0], paper.goal("align")[0], paper.goal("grasp")[0], paper.single[0]}
    rng = np.random.default_rng(0)
    # Every situation, and many random states around the cube (all situations, all distances).
    targets = [make_state([0, 0, 0.005], fingers=0.024, lift=0.05), make_state([0, 0, 0.005], fingers=0.024),
               make_state([0, 0, 0.005]), make_state([0, 0, -0.05]), make_state([0.1, 0, -0.05]),
               make_state([0.3, 0, 0]), make_state([0.5, 0.2, 0])]
    rel = rng.uniform(-0.4, 0.4, size=(3000, 3)) * rng.uniform(0, 1, size=(3000, 1)) ** 2
    rand = [make_state(r, fingers=f, lift=l) for r, f, l in zip(rel, rng.uniform(0.02, 0.05, 3000),
                                                                  rng.choice([0.0, 0.05], 3000))]
    states = np.stack(targets * 300 + rand)
    assert set(situation_ids(states).tolist()) == set(range(len(SITUATION_NAMES)))
    caps = sample_captions(states, rng, CaptionConfig(mode="neutral"))
    vocabulary = neutral_vocabulary()
    for texts in (caps, vocabulary):
        exact, sub = _own_leaks(texts, prompts)
        assert not exact and not sub, sub
        assert prompt_leaks(texts, prompts) == []
    assert set(caps) <= set(vocabulary) and len(set(caps)) > 20
    # The same check catches the graded recipe, which trains on the prompts, and any letter case.
    graded = sample_captions(states, np.random.default_rng(0), CaptionConfig())
    assert _own_leaks(graded, prompts)[0] == {paper.baseline[0], paper.goal("approach")[0], paper.goal("align")[0], paper.goal("grasp")[0]}
    assert prompt_leaks(["Seen: " + paper.single[0].upper() + "."], prompts) != []


def test_neutral_mode_describes_every_situation_in_several_ways():
    from rmtl.tasks.fetch_lift.captions import NEUTRAL_SITUATIONS

    assert set(NEUTRAL_SITUATIONS) == set(SITUATION_NAMES)
    assert all(len(set(c)) >= 2 for c in NEUTRAL_SITUATIONS.values())
    import pytest

    with pytest.raises(ValueError, match="caption mode"):
        CaptionConfig(mode="prompted")

"""Prompt sets and their text embeddings (rmtl.reward.prompts)."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.errors import ConfigError
from rmtl.reward.prompts import PromptConfig, TextEmbeddings, embed_prompts
from rmtl.tasks import get_task


def test_paper_prompts_verbatim():
    p = get_task().prompts()  # pick-and-lift's own: its micro-task spec
    assert p.baseline == ("a robot gripper and a red cube on a table",)
    assert p.goal("approach") == ("a two-finger robot gripper with open jaws centered above a red cube",)
    assert p.goal("align") == ("a robot gripper pinching a red cube between two fingers",)
    assert p.goal("grasp") == ("a robot gripper lifting a red cube between its fingers",)
    assert p.goal_names == ("approach", "align", "grasp")
    assert p.goals() == (p.goal("approach"), p.goal("align"), p.goal("grasp"))
    assert p.goals(single_prompt=True) == (p.single,)  # one goal: K = 1


def test_unset_texts_are_the_tasks_and_only_a_resolved_config_scores():
    with pytest.raises(ConfigError, match="resolve them against the task"):
        PromptConfig().goals()
    p = PromptConfig.make(micro_task_goals={"grasp": "a gripper holding a cube up"})
    r = get_task().prompts(p)
    assert r.goal_names == ("approach", "align", "grasp")  # task order, the rest the task's
    assert r.goal("grasp") == ("a gripper holding a cube up",) and r.goal("align") == get_task().prompts().goal("align")
    with pytest.raises(ConfigError, match="'lift', which is not a micro-task of the task"):
        get_task().prompts(PromptConfig.make(micro_task_goals={"lift": "x"}))
    with pytest.raises(ConfigError, match="misses a goal for the micro-task 'approach'"):
        PromptConfig.for_micro_tasks(get_task().micro_tasks, p, complete=True)


def test_goal_keys_layout_with_goals_as_top_level_keys_is_read():
    # Configs saved before the task-generic layout named pick-and-lift's goals as fields.
    old = {"baseline": ["b"], "approach": ["a"], "align": ["l"], "grasp": ["g"], "single": ["s"],
           "micro_task_goals": None}
    p = PromptConfig.model_validate(old)
    assert p.micro_task_goals == {"approach": ("a",), "align": ("l",), "grasp": ("g",)}
    assert get_task().prompts(p).goals() == (("a",), ("l",), ("g",))
    assert PromptConfig.model_validate(p.model_dump()) == p  # the new layout round-trips


def test_strings_become_lists_and_empty_is_rejected():
    p = PromptConfig.make(grasp="a gripper holding a cube up")
    assert p.micro_task_goals == {"grasp": ("a gripper holding a cube up",)}
    with pytest.raises(ConfigError, match="prompts|grasp"):
        PromptConfig.make(grasp=[])


class FakeEncoder:
    """Deterministic unit vectors per text; counts calls."""

    def __init__(self, dim=8):
        self.dim, self.calls = dim, 0

    def __call__(self, texts):
        self.calls += 1
        out = []
        for t in texts:
            v = np.random.default_rng(abs(hash(t)) % 2**32).normal(size=self.dim)
            out.append(v / np.linalg.norm(v))
        return np.asarray(out, dtype=np.float32)


def test_mean_of_phrasings_not_renormalised():
    enc = FakeEncoder()
    p = get_task().prompts(PromptConfig.make(approach=["above the cube", "over the red cube"]))
    te = embed_prompts(enc, p)
    assert enc.calls == 1  # baseline and all goals in one encoder call
    expected = enc(["above the cube", "over the red cube"]).mean(0)
    np.testing.assert_allclose(te.goals[0], expected, atol=1e-6)
    assert np.linalg.norm(te.goals[0]) < 0.999
    assert te.goals.shape == (3, 8) and te.baseline.shape == (8,)
    back = TextEmbeddings.from_dict(te.to_dict())
    np.testing.assert_allclose(back.goals, te.goals, atol=1e-6)
    assert back.goal_texts == te.goal_texts


def test_single_prompt_has_one_goal():
    enc = FakeEncoder()
    paper = get_task().prompts()
    te = embed_prompts(enc, paper, single_prompt=True)
    assert te.goals.shape == (1, 8) and te.goal_texts == (paper.single,)
    np.testing.assert_allclose(te.goals[0], enc(list(paper.single))[0], atol=1e-6)

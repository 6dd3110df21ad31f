"""Prompt sets and their text embeddings (rmtl.reward.prompts)."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.errors import ConfigError
from rmtl.reward.prompts import PromptConfig, TextEmbeddings, embed_prompts


def test_paper_prompts_verbatim():
    p = PromptConfig()
    assert p.baseline == ("a robot gripper and a red cube on a table",)
    assert p.approach == ("a two-finger robot gripper with open jaws centered above a red cube",)
    assert p.align == ("a robot gripper pinching a red cube between two fingers",)
    assert p.grasp == ("a robot gripper lifting a red cube between its fingers",)
    assert p.goals() == (p.approach, p.align, p.grasp)
    assert p.goals(single_prompt=True) == (p.single,)  # one goal: K = 1


def test_strings_become_lists_and_empty_is_rejected():
    p = PromptConfig.make(grasp="a gripper holding a cube up")
    assert p.grasp == ("a gripper holding a cube up",)
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
    p = PromptConfig.make(approach=["above the cube", "over the red cube"])
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
    te = embed_prompts(enc, PromptConfig(), single_prompt=True)
    assert te.goals.shape == (1, 8) and te.goal_texts == (PromptConfig().single,)
    np.testing.assert_allclose(te.goals[0], enc(list(PromptConfig().single))[0], atol=1e-6)

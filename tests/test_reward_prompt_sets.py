"""Prompt sets as YAML data (rmtl.reward.prompt_sets): the shipped sets, content ids, one-line errors."""

from __future__ import annotations

import pytest

from rmtl.errors import ConfigError
from rmtl.reward.prompt_sets import (
    PROMPT_SETS_DIR, load_prompt_set, load_prompt_sets, parse_prompt_set, shipped_prompt_sets,
)
from rmtl.tasks import get_task

GOALS = {"approach": "above the cube", "align": "pinching the cube", "grasp": "lifting the cube"}


def test_shipped_sets_are_valid_and_the_defaults_are_the_papers():
    sets = {s.name: s for s in shipped_prompt_sets()}
    assert {"paper", "single"} <= set(sets) and len(sets) >= 4
    assert sets["paper"].prompts == get_task().prompts() and not sets["paper"].single_prompt
    assert sets["single"].single_prompt and sets["single"].prompts.single == get_task().prompts().single
    assert sets["single"].roles == ("baseline", "single") and sets["single"].num_goals == 1
    assert len({s.id for s in sets.values()}) == len(sets)
    assert load_prompt_set("paper").id == sets["paper"].id  # a shipped set by name
    assert (PROMPT_SETS_DIR / "paper.yaml").is_file()


def test_id_is_the_content_not_the_name():
    a = parse_prompt_set({"name": "a", "baseline": "a table", "goals": GOALS})
    b = parse_prompt_set({"name": "b", "description": "other words", "baseline": "a table", "goals": GOALS})
    c = parse_prompt_set({"baseline": "a table", "goals": {**GOALS, "grasp": "raising the cube"}})
    d = parse_prompt_set({"baseline": "a table", "goals": GOALS, "paraphrases": {"grasp": ["holding the cube up"]}})
    assert a.id == b.id and len({a.id, c.id, d.id}) == 3
    assert d.prompts.goal("grasp") == ("lifting the cube", "holding the cube up")
    assert ("grasp", "holding the cube up") in d.rows()


def test_directory_of_sets(tmp_path):
    (tmp_path / "one.yaml").write_text("baseline: a table\ngoals: {approach: x, align: y, grasp: z}\n")
    (tmp_path / "two.yml").write_text("single_prompt: true\nbaseline: a table\nsingle: lift it\n")
    sets = load_prompt_sets(tmp_path)
    assert [s.name for s in sets] == ["one", "two"] and sets[1].single_prompt


@pytest.mark.parametrize("text, match", [
    ("baseline: [unclosed\n", r"is not valid YAML at line 2"),
    ("baseline: a table\ngoals: {approach: x, grasp: z}\n", r"misses a goal for the micro-task 'align'"),
    ("baseline: a table\ngoals: {approach: x, align: y, grasp: z, lift: w}\n", r"'lift', which is not a micro-task"),
    ("goals: {approach: x, align: y, grasp: z}\n", r"has no baseline"),
    ("baseline: a table\n", r"has no goals mapping"),
    ("baseline: a table\ngoal: {approach: x}\n", r"unknown key 'goal'"),
    ("baseline: a table\ngoals: {approach: x, align: y, grasp: ''}\n", r"goals.grasp must be a non-empty text"),
    ("single_prompt: true\nbaseline: a table\n", r"has no single goal"),
    ("baseline: a table\ngoals: {approach: x, align: y, grasp: z}\nparaphrases: {lift: [w]}\n", r"paraphrases of 'lift'"),
    ("- a list\n", r"must be a mapping"),
])
def test_bad_files_fail_with_one_line(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:  # which micro-tasks: checked where a set meets its task
        load_prompt_set(path).for_task(get_task().micro_tasks)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_a_set_meets_its_task_in_task_order():
    s = parse_prompt_set({"baseline": "a table", "goals": {"grasp": "z", "approach": "x", "align": "y"}})
    assert s.prompts.goal_names == ("grasp", "approach", "align")  # as written
    t = s.for_task(get_task().micro_tasks)
    assert t.prompts.goal_names == ("approach", "align", "grasp")
    u = parse_prompt_set({"baseline": "a table", "goals": {"approach": "x", "align": "y", "grasp": "z"},
                          "single": get_task().prompts().single[0]})
    assert t.id == u.for_task(get_task().micro_tasks).id  # the content, not the order
    assert s.roles == ("baseline", "grasp", "approach", "align")  # no single goal given ...
    assert t.roles == ("baseline", "approach", "align", "grasp", "single")  # ... until it meets its task
    assert t.prompts.single == get_task().prompts().single


def test_missing_file_names_the_shipped_sets(tmp_path):
    with pytest.raises(ConfigError, match="does not exist.*paper"):
        load_prompt_set(tmp_path / "nope.yaml")

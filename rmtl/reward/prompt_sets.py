"""Prompt sets as data: YAML files validated into :class:`PromptConfig`, named by a hash of their texts.

A prompt-set file (docs/reward.md, "Prompt sets")::

    name: paper                   # optional; default: the file name
    description: App. A verbatim  # optional
    single_prompt: false          # optional; true: the single goal is the only goal (one phase)
    baseline: a robot gripper and a red cube on a table
    goals:                        # one per micro-task of the task, in task order; not with single_prompt
      approach: ...
      align: ...
      grasp: ...
    single: ...                   # the single global goal (default: the paper's)
    paraphrases:                  # optional: more phrasings of any role, averaged with the first
      grasp: [..., ...]

The id of a set is 12 hex digits of a SHA-256 over the texts its reward uses (roles and
phrasings in order) and ``single_prompt``; the name and description are not part of it,
so a renamed file keeps its id and an edited text gets a new one. The project's own sets
live in ``rmtl/reward/prompt_sets/`` (:func:`shipped_prompt_sets`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import yaml

from rmtl.errors import ConfigError
from rmtl.micro_tasks import MicroTaskSpec
from rmtl.reward.prompts import PromptConfig

PROMPT_SETS_DIR = Path(__file__).resolve().parent / "prompt_sets"
"""The prompt sets shipped with rmtl (package data)."""


_KEYS = ("name", "description", "single_prompt", "baseline", "goals", "single", "paraphrases")


@dataclass(frozen=True)
class PromptSet:
    """A validated prompt set: its prompts, whether its reward is single-prompt, and where it came from."""

    name: str
    prompts: PromptConfig
    single_prompt: bool = False
    description: str = ""
    source: str | None = None

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles its reward uses, in storage order: baseline and single for a single-prompt set,
        else baseline, each micro-task's goal (task order) and single (when the set gives one)."""
        single = ("single",) if self.prompts.single is not None else ()
        return ("baseline", *single) if self.single_prompt else ("baseline", *self.prompts.goal_names, *single)

    def rows(self) -> list[tuple[str, str]]:
        """(role, phrasing) of every text in storage order (a text may appear under two roles)."""
        return [(role, text) for role in self.roles for text in self.prompts.texts(role)]

    @property
    def id(self) -> str:
        """Content hash: the texts of :attr:`roles` and ``single_prompt`` (not name or description)."""
        content = {"single_prompt": self.single_prompt,
                   "roles": {role: list(self.prompts.texts(role)) for role in self.roles}}
        blob = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def for_task(self, spec: MicroTaskSpec) -> PromptSet:
        """This set for a task whose micro-tasks are ``spec``: a micro-task set must name a goal for
        each of them (one line otherwise) and comes out in task order, with the task's single goal
        if it gives none (so its id is the one it had when that default was the paper's); a
        single-prompt set as it is."""
        if self.single_prompt:
            return self
        prompts = PromptConfig.for_micro_tasks(spec, self.prompts, complete=True, origin=f"prompt set {self.source or self.name}")
        return replace(self, prompts=prompts)

    @property
    def num_goals(self) -> int:
        return 1 if self.single_prompt else len(self.prompts.goal_names)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe record (store attributes, reports): name, id, kind and every role's phrasings."""
        return {"name": self.name, "id": self.id, "single_prompt": self.single_prompt,
                "description": self.description, **{r: list(self.prompts.texts(r)) for r in self.roles}}


def _text(value: Any, where: str, origin: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"prompt set {origin}: {where} must be a non-empty text, got {value!r}")
    return value


def _goal_texts(data: Mapping[str, Any], single_prompt: bool, origin: str) -> dict[str, list[str]]:
    """The goals of a set by micro-task name (none for a single-prompt set, which has a single goal)."""
    goals = data.get("goals")
    if single_prompt:
        if goals is not None:
            raise ConfigError(f"prompt set {origin} is single_prompt but has goals; a single-prompt set has only "
                              f"baseline and single")
        if "single" not in data:
            raise ConfigError(f"prompt set {origin} is single_prompt but has no single goal")
        return {}
    if not isinstance(goals, Mapping) or not goals:
        raise ConfigError(f"prompt set {origin} has no goals mapping; give one goal per micro-task of the task "
                          f"(pick-and-lift: approach, align, grasp), or single_prompt: true with a single goal")
    # which names a task needs is checked where the set meets one (for_task)
    return {str(task): [_text(goals[task], f"goals.{task}", origin)] for task in goals}


def _add_paraphrases(texts: dict[str, list[str]], paraphrases: Any, origin: str) -> None:
    """Each role's further phrasings after its text (a role the set does not give is refused)."""
    if not isinstance(paraphrases, Mapping):
        raise ConfigError(f"prompt set {origin}: paraphrases must map a role to a list of texts")
    for role, more in paraphrases.items():
        if role not in texts:
            used = list(texts)
            raise ConfigError(f"prompt set {origin}: paraphrases of {role!r}, which this set does not give "
                              f"(it has {', '.join(used)})")
        more = [more] if isinstance(more, str) else more
        if not isinstance(more, list) or not more:
            raise ConfigError(f"prompt set {origin}: paraphrases.{role} must be a non-empty list of texts")
        texts[role] += [_text(t, f"paraphrases.{role}", origin) for t in more]


def parse_prompt_set(data: Any, origin: str = "<mapping>", name: str | None = None) -> PromptSet:
    """Validate the mapping of a prompt-set file (module docstring); one-line ConfigError on any problem."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"prompt set {origin} must be a mapping with baseline and goals, got {type(data).__name__}")
    unknown = [k for k in data if k not in _KEYS]
    if unknown:
        raise ConfigError(f"prompt set {origin}: unknown key {unknown[0]!r}; keys are {', '.join(_KEYS)}")
    single_prompt = data.get("single_prompt", False)
    if not isinstance(single_prompt, bool):
        raise ConfigError(f"prompt set {origin}: single_prompt must be true or false, got {single_prompt!r}")
    if "baseline" not in data:
        raise ConfigError(f"prompt set {origin} has no baseline (the scene without the goal, e.g. "
                          f"'a robot gripper and a red cube on a table')")
    texts: dict[str, list[str]] = {"baseline": [_text(data["baseline"], "baseline", origin)]}
    texts.update(_goal_texts(data, single_prompt, origin))
    if "single" in data:
        texts["single"] = [_text(data["single"], "single", origin)]
    _add_paraphrases(texts, data.get("paraphrases") or {}, origin)
    prompts = PromptConfig.make(baseline=texts.pop("baseline"), single=texts.pop("single", None),
                                micro_task_goals=texts or None)
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise ConfigError(f"prompt set {origin}: description must be a text")
    set_name = data.get("name") or name or "prompt-set"
    if not isinstance(set_name, str):
        raise ConfigError(f"prompt set {origin}: name must be a text, got {set_name!r}")
    return PromptSet(set_name, prompts, single_prompt, description, origin)


def load_prompt_set(path: str | Path) -> PromptSet:
    """A prompt set from a YAML file, or a shipped set by name (``paper``, ``single``, ...)."""
    p = Path(path)
    if not p.exists() and p.suffix == "" and (PROMPT_SETS_DIR / f"{p.name}.yaml").is_file():
        p = PROMPT_SETS_DIR / f"{p.name}.yaml"
    if not p.is_file():
        shipped = ", ".join(s.stem for s in sorted(PROMPT_SETS_DIR.glob("*.yaml")))
        raise ConfigError(f"prompt set {p} does not exist; give a YAML file or a shipped set ({shipped})")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"prompt set {p} is not valid YAML{at}: {problem}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"prompt set {p} is not a text file") from None
    return parse_prompt_set(data, str(p), name=p.stem)


def load_prompt_sets(path: str | Path) -> list[PromptSet]:
    """Every ``*.yaml``/``*.yml`` set in a directory (sorted by file name), or the one set of a file."""
    p = Path(path)
    if p.is_dir():
        files = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
        if not files:
            raise ConfigError(f"{p} holds no prompt-set files (*.yaml)")
        sets = [load_prompt_set(f) for f in files]
    else:
        sets = [load_prompt_set(p)]
    names = [s.name for s in sets]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ConfigError(f"two prompt sets in {p} are named {dup!r}; give each a distinct name")
    return sets


def shipped_prompt_sets() -> list[PromptSet]:
    """The prompt sets shipped in :data:`PROMPT_SETS_DIR`."""
    return load_prompt_sets(PROMPT_SETS_DIR)


def config_prompt_sets(prompts: PromptConfig) -> tuple[PromptSet, PromptSet]:
    """The micro-task set and the single-prompt set of a resolved PromptConfig: ``paper`` and
    ``single`` for the paper's texts (the shipped files' ids), else ``custom`` and ``custom-single``."""
    default = prompts == load_prompt_set(PROMPT_SETS_DIR / "paper.yaml").prompts
    return (PromptSet("paper" if default else "custom", prompts, False),
            PromptSet("single" if default else "custom-single", prompts, True))


def default_prompt_sets() -> list[PromptSet]:
    """The paper's micro-task set and the single-prompt set (their texts are pick-and-lift's micro-task spec's)."""
    return [load_prompt_set(PROMPT_SETS_DIR / "paper.yaml"), load_prompt_set(PROMPT_SETS_DIR / "single.yaml")]

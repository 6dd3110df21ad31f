"""Prompt sets (paper App. A) and their text embeddings.

A prompt is a list of phrasings; its embedding is the mean of the unit embeddings of
the phrasings, not renormalised (VLM-RMs; docs/reward.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from pydantic import field_validator, model_validator

from rmtl.config import Config
from rmtl.errors import ConfigError
from rmtl.micro_tasks import MicroTaskSpec

TextEncoder = Callable[[Sequence[str]], np.ndarray]
"""Texts -> unit embeddings float32 [n, D] (e.g. ``VLM.encode_text``)."""


def _as_phrasings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    phrasings = tuple(value)
    if not phrasings or any(not isinstance(p, str) or not p.strip() for p in phrasings):
        raise ValueError("a prompt is a non-empty text or a non-empty list of non-empty texts")
    return phrasings


class PromptConfig(Config):
    """Baseline, one goal per micro-task (by name, in task order) and the single global goal;
    each a list of phrasings. What is left unset (None) is the task's own, from its micro-task
    spec (pick-and-lift: ``rmtl/tasks/fetch_lift/micro_tasks.yaml``, the paper's App. A).

    A config is *resolved* against a task by :meth:`for_micro_tasks` (the entry points do it:
    a run's reward config, an analysis of a store); only a resolved config gives
    :meth:`goals`. Configs of the goal-keys layout (v1) named pick-and-lift's goals as top-level keys
    (``approach: ...``); those keys are read as ``micro_task_goals`` entries."""

    baseline: tuple[str, ...] | None = None
    """Baseline b: the scene without the goal property (None: the task's)."""
    micro_task_goals: dict[str, tuple[str, ...]] | None = None
    """Goals by micro-task name; a resolved config names every micro-task, in task order (the
    index is the phase id). Unresolved, any subset (None: all the task's own)."""
    single: tuple[str, ...] | None = None
    """Global goal of the single-prompt baseline, its only goal (one phase) when single_prompt is on
    (None: the task's)."""

    @model_validator(mode="before")
    @classmethod
    def _goal_keys_layout(cls, data: Any) -> Any:
        # Top-level keys that are no field were goals by micro-task name (the goal-keys layout, v1).
        if not isinstance(data, Mapping):
            return data
        named = {k: v for k, v in data.items() if k not in cls.model_fields}
        if not named:
            return data
        goals = dict(data.get("micro_task_goals") or {})
        return {**{k: v for k, v in data.items() if k in cls.model_fields}, "micro_task_goals": {**goals, **named}}

    @field_validator("baseline", "single", mode="before")
    @classmethod
    def _phrasings(cls, v: Any) -> tuple[str, ...] | None:
        return None if v is None else _as_phrasings(v)

    @field_validator("micro_task_goals", mode="before")
    @classmethod
    def _goals(cls, v: Any) -> dict[str, tuple[str, ...]] | None:
        if v is None:
            return None
        if not isinstance(v, Mapping) or not v:
            raise ValueError("micro_task_goals maps micro-task names (in task order) to their goal prompts")
        goals = {}
        for name, goal in v.items():
            try:
                goals[str(name)] = _as_phrasings(goal)
            except ValueError as e:
                raise ValueError(f"the goal of {name!r}: {e}") from None
        return goals

    @classmethod
    def for_micro_tasks(cls, spec: MicroTaskSpec, configured: PromptConfig | None = None,
                        complete: bool = False, origin: str = "prompts") -> PromptConfig:
        """``configured`` resolved against a task whose micro-tasks are ``spec``: what it leaves
        unset is the spec's, goals in the spec's order. A goal for a name that is no micro-task
        of the spec fails in one line; so does a missing goal when ``complete`` (a prompt set
        must name every micro-task)."""
        c = configured or cls()
        given = c.micro_task_goals or {}
        names = ", ".join(spec.names)
        extra = [n for n in given if n not in spec.names]
        if extra:
            raise ConfigError(f"{origin}: goals has {extra[0]!r}, which is not a micro-task of the task ({names})")
        missing = [n for n in spec.names if n not in given]
        if complete and missing:
            raise ConfigError(f"{origin} misses a goal for the micro-task {missing[0]!r} (every micro-task needs one: {names})")
        return cls(baseline=c.baseline or spec.baseline, single=c.single or spec.single,
                   micro_task_goals={n: given.get(n, spec.goals[n]) for n in spec.names})

    @property
    def resolved(self) -> bool:
        """Whether every text is set (:meth:`for_micro_tasks` gives such a config)."""
        return None not in (self.baseline, self.micro_task_goals, self.single)

    @staticmethod
    def _given(value: Any, what: str) -> Any:
        if value is None:
            raise ConfigError(f"these prompts leave {what} to the task; resolve them against the task first "
                              f"(PromptConfig.for_micro_tasks(task.micro_tasks, prompts))")
        return value

    @property
    def goal_names(self) -> tuple[str, ...]:
        """Micro-task names of :meth:`goals` (phase order)."""
        return tuple(self._given(self.micro_task_goals, "the micro-task goals"))

    def goal(self, name: str) -> tuple[str, ...]:
        """The phrasings of micro-task ``name``'s goal."""
        return self._given(self.micro_task_goals, "the micro-task goals")[name]

    def texts(self, role: str) -> tuple[str, ...]:
        """The phrasings of a role: ``baseline``, ``single`` or a micro-task name."""
        if role in ("baseline", "single"):
            return self._given(getattr(self, role), f"the {role}")
        return self.goal(role)

    def goals(self, single_prompt: bool = False) -> tuple[tuple[str, ...], ...]:
        """Goal phrasings per phase in task order (:attr:`goal_names`); with single_prompt the
        one global goal alone (K = 1: a single-prompt reward has no phases)."""
        if single_prompt:
            return (self._given(self.single, "the single goal"),)
        return tuple(self._given(self.micro_task_goals, "the micro-task goals").values())


@dataclass(frozen=True)
class TextEmbeddings:
    """Baseline [D] and goal embeddings [K, D] (phase order), with the texts they came from."""

    baseline: np.ndarray
    goals: np.ndarray
    baseline_texts: tuple[str, ...]
    goal_texts: tuple[tuple[str, ...], ...]

    @property
    def dim(self) -> int:
        return int(self.baseline.shape[-1])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (e.g. for store attributes)."""
        return {
            "baseline": self.baseline.astype(float).tolist(),
            "goals": self.goals.astype(float).tolist(),
            "baseline_texts": list(self.baseline_texts),
            "goal_texts": [list(t) for t in self.goal_texts],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TextEmbeddings:
        return cls(
            baseline=np.asarray(data["baseline"], dtype=np.float32),
            goals=np.asarray(data["goals"], dtype=np.float32),
            baseline_texts=tuple(data["baseline_texts"]),
            goal_texts=tuple(tuple(t) for t in data["goal_texts"]),
        )


def embed_prompts(encode_text: TextEncoder, prompts: PromptConfig, single_prompt: bool = False) -> TextEmbeddings:
    """Embed baseline and goals with one text-encoder call; each prompt = mean of its phrasings' unit vectors."""
    goal_texts = prompts.goals(single_prompt)
    groups = (prompts.texts("baseline"), *goal_texts)
    flat = [t for g in groups for t in g]
    emb = np.asarray(encode_text(flat), dtype=np.float32)
    # Unit vectors per phrasing (the encoder should already return them; stored ones may be fp16).
    emb = emb / np.linalg.norm(emb, axis=-1, keepdims=True)
    means, start = [], 0
    for g in groups:
        means.append(emb[start : start + len(g)].mean(axis=0))
        start += len(g)
    return TextEmbeddings(
        baseline=means[0].astype(np.float32),
        goals=np.stack(means[1:]).astype(np.float32),
        baseline_texts=prompts.baseline,
        goal_texts=goal_texts,
    )

"""Prompt sets (paper App. A) and their text embeddings.

A prompt is a list of phrasings; its embedding is the mean of the unit embeddings of
the phrasings, not renormalised (VLM-RMs; docs/reward.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from pydantic import field_validator

from rmtl.config import Config
from rmtl.errors import ConfigError
from rmtl.micro_tasks import MicroTaskSpec
from rmtl.phases import MICRO_TASKS, PHASES

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
    """Baseline, per-micro-task goals and the single global goal; each a list of phrasings
    (defaults: the pick-and-lift micro-task spec, rmtl/tasks/fetch_lift/micro_tasks.yaml).

    Another task's goals go in ``micro_task_goals`` (:meth:`for_micro_tasks` builds the
    prompts of a task's micro-task spec); then ``approach/align/grasp`` are not used."""

    baseline: tuple[str, ...] = MICRO_TASKS.baseline
    """Baseline b: the scene without the goal property."""
    approach: tuple[str, ...] = MICRO_TASKS.goals["approach"]
    """Goal of the approach micro-task."""
    align: tuple[str, ...] = MICRO_TASKS.goals["align"]
    """Goal of the align micro-task."""
    grasp: tuple[str, ...] = MICRO_TASKS.goals["grasp"]
    """Goal of the grasp micro-task."""
    single: tuple[str, ...] = MICRO_TASKS.single
    """Global goal of the single-prompt baseline: its only goal (one phase) when single_prompt is on."""
    micro_task_goals: dict[str, tuple[str, ...]] | None = None
    """Goals of another task's micro-tasks, by name in task order (the index is the phase id);
    None: pick-and-lift's approach/align/grasp."""

    @field_validator("baseline", "approach", "align", "grasp", "single", mode="before")
    @classmethod
    def _phrasings(cls, v: Any) -> tuple[str, ...]:
        return _as_phrasings(v)

    @field_validator("micro_task_goals", mode="before")
    @classmethod
    def _goals(cls, v: Any) -> dict[str, tuple[str, ...]] | None:
        if v is None:
            return None
        if not isinstance(v, dict) or not v:
            raise ValueError("micro_task_goals maps micro-task names (in task order) to their goal prompts")
        return {str(name): _as_phrasings(goal) for name, goal in v.items()}

    @classmethod
    def for_micro_tasks(cls, spec: MicroTaskSpec, configured: PromptConfig | None = None) -> PromptConfig:
        """The prompts of a task whose micro-tasks are ``spec``: ``configured`` if it names
        goals of exactly its micro-tasks (other names fail in one line); else pick-and-lift's
        are ``configured`` (default: the paper's) and another task's the spec's own goals,
        baseline and single goal."""
        if configured is not None and configured.micro_task_goals is not None:
            if tuple(configured.micro_task_goals) != spec.names:
                raise ConfigError(f"prompts.micro_task_goals names {list(configured.micro_task_goals)}, but the task's "
                                  f"micro-tasks are {list(spec.names)} (in task order)")
            return configured
        if spec == MICRO_TASKS:
            return configured or cls()
        return cls(baseline=spec.baseline, single=spec.single, micro_task_goals={n: spec.goals[n] for n in spec.names})

    @property
    def goal_names(self) -> tuple[str, ...]:
        """Micro-task names of :meth:`goals` (phase order)."""
        return tuple(self.micro_task_goals) if self.micro_task_goals is not None else PHASES

    def goals(self, single_prompt: bool = False) -> tuple[tuple[str, ...], ...]:
        """Goal phrasings per phase in task order (:attr:`goal_names`); with single_prompt the
        one global goal alone (K = 1: a single-prompt reward has no phases)."""
        if single_prompt:
            return (self.single,)
        if self.micro_task_goals is not None:
            return tuple(self.micro_task_goals.values())
        return tuple(getattr(self, name) for name in PHASES)


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
    def from_dict(cls, data: dict[str, Any]) -> "TextEmbeddings":
        return cls(
            baseline=np.asarray(data["baseline"], dtype=np.float32),
            goals=np.asarray(data["goals"], dtype=np.float32),
            baseline_texts=tuple(data["baseline_texts"]),
            goal_texts=tuple(tuple(t) for t in data["goal_texts"]),
        )


def embed_prompts(encode_text: TextEncoder, prompts: PromptConfig, single_prompt: bool = False) -> TextEmbeddings:
    """Embed baseline and goals with one text-encoder call; each prompt = mean of its phrasings' unit vectors."""
    goal_texts = prompts.goals(single_prompt)
    groups = (prompts.baseline, *goal_texts)
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

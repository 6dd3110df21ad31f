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
    (defaults: the task's micro-task spec, rmtl/tasks/fetch_lift/micro_tasks.yaml)."""

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

    @field_validator("baseline", "approach", "align", "grasp", "single", mode="before")
    @classmethod
    def _phrasings(cls, v: Any) -> tuple[str, ...]:
        return _as_phrasings(v)

    def goals(self, single_prompt: bool = False) -> tuple[tuple[str, ...], ...]:
        """Goal phrasings per phase in task order (PHASES); with single_prompt the one global
        goal alone (K = 1: a single-prompt reward has no phases)."""
        if single_prompt:
            return (self.single,)
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

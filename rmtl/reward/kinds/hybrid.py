"""A hybrid scorer (a diagnostic): the VLM scores some micro-tasks from pixels, the oracle the
others, so a pixel reward's failure can be put on the micro-task that causes it.

Each micro-task keeps its own shaping bounds, so the two scorers' scales never mix: a micro-task
scored by the oracle is paid exactly as under the ``oracle`` kind, one scored by the VLM exactly as
under ``vlm``. Frames are rendered and embedded only for envs whose active micro-task the VLM
scores. With no VLM micro-task it is the oracle; with all of them, the VLM reward.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from rmtl.errors import ConfigError
from rmtl.micro_tasks import micro_task_indices
from rmtl.reward.kinds import register_kind
from rmtl.reward.kinds.base import KindStep, RunFacts, shaped_terms
from rmtl.reward.kinds.oracle import OracleKind, OracleProgressConfig
from rmtl.reward.kinds.vlm import RewardConfig, VLMKind
from rmtl.reward.shaping import RewardShaper


class HybridRewardConfig(RewardConfig):
    """The VLM reward's config plus which micro-tasks the VLM scores (the oracle scores the rest)."""

    kind: Literal["hybrid"] = "hybrid"  # type: ignore[assignment]
    vlm_micro_tasks: tuple[str, ...] = ()
    """Micro-task names the VLM scores; every other micro-task is scored by the oracle."""
    progress: OracleProgressConfig = OracleProgressConfig()
    """The oracle scorer's goal states and scales."""


@register_kind("hybrid", config=HybridRewardConfig)
class HybridKind(VLMKind):
    privileged = True

    def __init__(self, vlm_kind: VLMKind, oracle: OracleKind, vlm_phases: tuple[int, ...]):
        self.vlm_kind, self.oracle = vlm_kind, oracle
        if vlm_kind.num_phases != oracle.num_phases:
            raise ConfigError(f"the hybrid's VLM scores {vlm_kind.num_phases} micro-tasks, its oracle {oracle.num_phases}; "
                              "a hybrid needs the micro-task prompts (not the single prompt)")
        self.num_phases = oracle.num_phases
        self.vlm_phases = np.asarray(sorted(vlm_phases), dtype=np.int64)
        self.views, self.resolution = vlm_kind.views, vlm_kind.resolution
        self.add_env_reward = vlm_kind.add_env_reward

    @classmethod
    def build(cls, reward: HybridRewardConfig, task, facts: RunFacts, *, vlm=None, source=None) -> HybridKind:
        import functools

        vlm_phases = micro_task_indices(task.micro_tasks.names, reward.vlm_micro_tasks, "reward.vlm_micro_tasks")
        if reward.single_prompt:
            raise ConfigError("a hybrid scores each micro-task with its own prompt; unset reward.single_prompt")
        if task.oracle_progress is None:
            raise ConfigError(f"task {task.name!r} defines no oracle progress; a hybrid needs one (Task.oracle_progress)")
        oracle = OracleKind(functools.partial(task.oracle_progress, config=reward.progress), len(task.micro_tasks.names),
                            reward.shaping.initial_low, reward.shaping.initial_high, reward.add_env_reward)
        vlm_kind = VLMKind.from_config(reward, vlm=vlm, source=source)
        return cls(vlm_kind, oracle, vlm_phases)

    def bind(self, venv: Any) -> None:
        self.vlm_kind.bind(venv)

    def step(self, states: np.ndarray, phases: np.ndarray, shaper: RewardShaper, render) -> KindStep:
        n = states.shape[0]
        scores = self.oracle.scores(states)
        by_vlm = np.isin(phases, self.vlm_phases)
        idx = np.flatnonzero(by_vlm)
        if len(idx):
            embeddings = np.asarray(self.vlm_kind.source(states[idx], lambda j: render(idx[np.asarray(j, np.int64)])))
            if embeddings.shape[:2] != (len(idx), len(self.views)):
                raise ConfigError(f"embedding source returned shape {embeddings.shape}; expected "
                                  f"[{len(idx)}, {len(self.views)}, D]")
            scores[idx] = self.vlm_kind.scorer(embeddings).aggregate
        active = scores[np.arange(n), phases]
        out = shaper(active, phases)
        terms = shaped_terms(out, active)
        terms["scores"] = scores.astype(np.float32)
        terms["by_vlm"] = by_vlm.astype(np.float32)
        return KindStep(out.reward, terms)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "vlm_micro_tasks": self.vlm_phases.tolist()}

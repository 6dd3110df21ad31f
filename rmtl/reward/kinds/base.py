"""What a reward kind is: the part of the reward that differs between kinds (what scores the
active micro-task, or what replaces the score), behind one interface the single
:class:`~rmtl.reward.vec_env.RewardVecEnv` calls.

A kind turns the states a vec-env step ended in (and, if it needs them, their frames) into
the shaped reward before the env's success bonus, plus the terms it reports. The phase
selector and the shaper are the wrapper's, so every kind sees the same phases and the same
shaping; a kind that is not shaped (the dense reference) simply ignores the shaper.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal
from collections.abc import Callable

import numpy as np

from rmtl.reward.shaping import RewardShaper, ShapingOutput

Render = Callable[[np.ndarray], np.ndarray]
"""env indices [M] -> frames uint8 [M, V, H, W, 3] of the states those envs' step ended in."""

ProgressSource = Literal["scores", "rule_band", "dense"]
"""Where a Stage-2 progress potential comes from: the kind's per-micro-task scores (the band level
of the rule's micro-task), the rule's band alone (u = 0.5), or the dense reference reward."""


@dataclass(frozen=True)
class RunFacts:
    """What a kind reads of the run it is built for, besides its reward config and task (a kind
    never sees the whole run config)."""

    seed: int = 0
    """The run seed (a degraded oracle's error seed follows it unless its config sets one)."""


@dataclass
class KindStep:
    """One vec-env step of a kind: the reward before the env bonus [N] and per-env terms for ``info['reward']``."""

    reward: np.ndarray
    terms: dict[str, np.ndarray] = field(default_factory=dict)
    """name -> [N] (scalars per env) or [N, ...] (arrays per env, e.g. the K scores)."""


def shaped_terms(out: ShapingOutput, score: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The shaper's per-env terms as ``info['reward']`` entries."""
    terms = out.named()
    if score is not None:
        terms["score"] = np.asarray(score, dtype=np.float32)
    return terms


class RewardKind(ABC):
    """One kind of reward. Subclasses register with :func:`rmtl.reward.kinds.register_kind`."""

    name: ClassVar[str]
    config_class: ClassVar[Any] = None
    """Its config class (a ``RewardKindConfig`` subclass), set by ``register_kind``."""
    needs_frames: ClassVar[bool] = False
    """Sub-envs must render the reward views (wrapped in TerminalFrames)."""
    progress_source: ClassVar[ProgressSource]
    """The Stage-2 progress potential this kind's runs use (named, never picked silently)."""
    privileged: ClassVar[bool] = False
    """Reads state beyond the phase (a reference or diagnostic, never a VLM result)."""

    num_phases: int
    """Micro-tasks the shaper keeps bounds and the band for (1: a single goal, no phase index); each
    kind sets it from its task (``len(task.micro_tasks.names)``), there is no default."""
    add_env_reward: bool = True
    """Add the env's own reward (the +1 success bonus) to the shaped reward."""

    @classmethod
    def build(cls, reward: Any, task: Any, facts: RunFacts, *, vlm: Any = None, source: Any = None) -> RewardKind:
        """The kind of a run: ``reward`` this kind's config (the VLM kind's resolved against the
        task's prompts), ``task`` the run's task (``rmtl.task.Task``), ``facts`` what the kind reads
        of the run (:class:`RunFacts`), ``vlm`` / ``source`` the loaded model and embedding source
        of a kind that renders."""
        raise NotImplementedError(f"reward kind {cls.name!r} cannot be built for a run")

    def bind(self, venv: Any) -> None:  # noqa: B027 (optional hook: most kinds need no vec env)
        """Called once by the wrapper with the vec env below it (e.g. to set up rendering)."""

    @abstractmethod
    def step(self, states: np.ndarray, phases: np.ndarray, shaper: RewardShaper, render: Render) -> KindStep:
        """The reward of the states [N, S] the step ended in, for the active micro-tasks ``phases`` [N]."""

    def describe(self) -> dict[str, Any]:
        """What a run records about its reward kind."""
        return {"kind": self.name, "num_phases": self.num_phases, "progress_source": self.progress_source,
                "privileged": self.privileged}

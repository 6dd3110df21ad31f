"""The rule-only control: the phase band with u held at ``u`` (0.5) and no scorer at all.

It pays what the active micro-task's index alone is worth under the shaping (the band, and
trend / momentum on its changes), so it needs no rendering. What a VLM reward gains over it
is the VLM's contribution; a result it matches is the rule's.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from rmtl.reward.config import RewardKindConfig
from rmtl.reward.kinds import register_kind
from rmtl.reward.kinds.base import KindStep, RewardKind, RunFacts, shaped_terms
from rmtl.reward.shaping import RewardShaper, ShapingConfig


class RuleOnlyRewardConfig(RewardKindConfig):
    """The rule-only control: the shaping of a held score, no scorer."""

    kind: Literal["rule_only"] = "rule_only"
    shaping: ShapingConfig = ShapingConfig()
    """The shaping of the held score (as a VLM run's)."""
    add_env_reward: bool = True
    """Add the environment's own reward (the +1 success bonus) to the shaped reward."""
    u: float = Field(0.5, ge=0, le=1)
    """The normalised score u held in every micro-task."""


@register_kind("rule_only", config=RuleOnlyRewardConfig)
class RuleOnlyKind(RewardKind):
    progress_source = "rule_band"

    def __init__(self, num_phases: int, u: float = 0.5, add_env_reward: bool = True):
        self.num_phases = int(num_phases)
        self.u = float(u)
        self.add_env_reward = add_env_reward

    @classmethod
    def build(cls, reward: RuleOnlyRewardConfig, task, facts: RunFacts, *, vlm=None, source=None) -> RuleOnlyKind:
        return cls(len(task.micro_tasks.names), reward.u, reward.add_env_reward)

    def step(self, states: np.ndarray, phases: np.ndarray, shaper: RewardShaper, render) -> KindStep:
        out = shaper.shape_u(np.full(states.shape[0], self.u), phases)
        terms = shaped_terms(out)
        del terms["low"], terms["high"]  # no scorer, no bounds
        return KindStep(out.reward, terms)

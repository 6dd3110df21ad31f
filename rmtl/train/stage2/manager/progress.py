"""The manager-independent progress potential Stage-2 segment returns are measured with
(so picking the prompt that scores highest earns nothing)."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from rmtl.errors import ConfigError
from rmtl.reward.phase import PhaseSelector
from rmtl.reward.shaping import RewardShaper, ShapingConfig
from rmtl.reward.vec_env import REWARD_INFO


class ProgressSignal:
    """Manager-independent progress potential Phi(s) in [-1, 0] of the states an env step ended in.

    Its ``source`` is the one the worker's reward kind names (``RewardKind.progress_source``):

    - ``scores``: Phi(s) = (k_rule(s) + u_rule(s)) / K - 1, the band level for the *rule's*
      micro-task k_rule(s) with its own score (``info["reward"]["scores"][k_rule]``: every
      micro-task is scored every step) normalised by bounds that only see rule-micro-task scores;
    - ``rule_band``: the same with u = 0.5 (a reward without a scorer);
    - ``dense``: the dense reference reward of the state (``dense_reward``, states -> rewards: the
      task's ``Task.dense_reward`` with the run's config).

    None depends on which micro-task the manager chose, so no choice of prompt changes it:
    only what the worker does does. ``rule`` is the task's phase rule (k_rule) and ``num_phases``
    its number of micro-tasks (K).
    """

    def __init__(self, num_envs: int, source: str = "scores", shaping: ShapingConfig | None = None,
                 dense_reward: Callable[[np.ndarray], np.ndarray] | None = None, *, num_phases: int,
                 rule: PhaseSelector):
        if source not in ("scores", "rule_band", "dense"):
            raise ConfigError(f"unknown progress source {source!r}; choose scores, rule_band or dense")
        if source == "dense" and dense_reward is None:
            raise ConfigError("the dense progress source needs the task's dense reward (dense_reward)")
        base = shaping or ShapingConfig()
        cfg = base.replace(enabled=True, level=True, band=True, trend=False, momentum=False, drop_penalty=False)
        self.source = source
        self.shaper = RewardShaper(num_envs, cfg, num_phases=num_phases)
        self.dense_reward = dense_reward
        self.rule = rule

    def __call__(self, states: np.ndarray, infos: Sequence[Mapping[str, Any]]) -> np.ndarray:
        states = np.asarray(states, dtype=np.float32)
        if self.source == "dense":
            return np.asarray(self.dense_reward(states), dtype=np.float64)
        rule = np.minimum(self.rule(states), self.shaper.num_phases - 1)
        if self.source == "rule_band":
            return self.shaper.shape_u(np.full(len(rule), 0.5), rule).level.astype(np.float64)
        scores = np.array([np.asarray(info[REWARD_INFO]["scores"], dtype=np.float64)[k] for info, k in zip(infos, rule)])
        return self.shaper(scores, rule).level.astype(np.float64)

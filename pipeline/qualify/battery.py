"""The battery: each family's mean discounted return under the scorer's reward (and under the single
prompt's), against the noise-free expert's."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.qualify.families import StateSet


def battery(task: Any, scores: np.ndarray | None, rows: StateSet, shaping: Any = None) -> dict[str, dict[str, float]]:
    """Mean discounted return per family under the scorer's reward (``shaping``, default the default;
    bounds adapted to all rows) and under rule-only; the noise-free expert's return is the bar no
    behaviour may reach."""
    from rmtl.reward.replay import discounted_returns, rule_only_rewards, shaped_rewards
    from rmtl.reward.shaping import ShapingConfig

    num_phases = len(task.micro_tasks.names)

    order = np.lexsort((rows.step, rows.episode))
    eps = [order[rows.episode[order] == e] for e in np.unique(rows.episode)]
    eps = [idx[rows.step[idx] > 0] for idx in eps]  # rewards are paid on the states steps end in
    phases = np.asarray(task.phases(rows.states), dtype=np.int64)
    success = [bool(rows.success[idx].any()) if len(idx) else False for idx in eps]
    owner = [str(rows.family[idx[0]]) if len(idx) else "" for idx in eps]
    returns = {"rule_only": discounted_returns(rule_only_rewards(phases, eps, num_phases), eps, success)}
    if scores is not None:
        active = scores[np.arange(len(phases)), phases]
        rewards = shaped_rewards(active, phases, eps, shaping or ShapingConfig(), num_phases, bounds="adapted")
        returns["scorer"] = discounted_returns(rewards, eps, success)
    owner_arr = np.asarray(owner)
    return {label: {f: float(ret[owner_arr == f].mean()) for f in dict.fromkeys(owner)} for label, ret in returns.items()}


def single_prompt_battery(scores: np.ndarray, rows: StateSet, shaping: Any = None) -> dict[str, float]:
    """Mean discounted return per family under the single-prompt reward (one goal, no phase: the
    paper's single-prompt baseline, scores [N, 1]); a behaviour at or above the noise-free expert is
    the "semantic trap" (a pose that scores high without the task being done)."""
    from rmtl.reward.replay import discounted_returns, shaped_rewards
    from rmtl.reward.shaping import ShapingConfig

    order = np.lexsort((rows.step, rows.episode))
    eps = [order[rows.episode[order] == e] for e in np.unique(rows.episode)]
    eps = [idx[rows.step[idx] > 0] for idx in eps]
    success = [bool(rows.success[idx].any()) if len(idx) else False for idx in eps]
    owner = np.asarray([str(rows.family[idx[0]]) if len(idx) else "" for idx in eps])
    zeros = np.zeros(len(rows.states), dtype=np.int64)
    rewards = shaped_rewards(np.asarray(scores)[:, 0], zeros, eps, shaping or ShapingConfig(), 1, bounds="adapted")
    ret = discounted_returns(rewards, eps, success)
    return {f: float(ret[owner == f].mean()) for f in dict.fromkeys(owner.tolist())}

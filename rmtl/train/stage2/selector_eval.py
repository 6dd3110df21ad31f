"""Evaluation of a worker under a phase selector: the rule, the learned manager or none."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rmtl.env.check import SuccessRate
from rmtl.env.episode import run_episode
from rmtl.task import Task
from rmtl.train.config import EnvConfig
from rmtl.errors import ConfigError
from rmtl.micro_tasks import phase_one_hot
from rmtl.reward.phase import RulePhaseSelector
from rmtl.train.config import FINAL_STAGE_RANGE
from rmtl.train.eval.evaluate import EvalResult
from rmtl.train.stage2.manager.network import ManagerNet
from rmtl.train.envs.phase_observation import PHASE_KEY


@dataclasses.dataclass
class SelectorEval:
    """Success of a worker under one phase selector, with per-step phase traces."""

    result: EvalResult
    selector: str
    step_agreement: float
    """Fraction of steps whose active phase equals the rule's."""
    decision_agreement: float
    """Fraction of decisions (every H steps) equal to the rule's phase at that state."""
    traces: list[dict[str, list]]
    episode_success: list[bool] = dataclasses.field(default_factory=list)
    """Success of each episode in seed order (paired comparisons of two selectors on the same seeds)."""
    phase_steps: list[int] = dataclasses.field(default_factory=list)
    """Steps spent with each phase active, [K] (K: the worker's phase count; empty without phase input)."""
    rule_phase_steps: list[int] = dataclasses.field(default_factory=list)
    """Steps the rule would have chosen each phase on the same states, [K]."""


def evaluate_selector(model: Any, env_config: EnvConfig | None = None, episodes: int = 50, seed: int = 1_000_000, *,
                      selector: str = "rule", manager: ManagerNet | None = None, horizon: int = 3,
                      normalizer: Any = None, deterministic: bool = True, traces: int = 0,
                      difficulty_range: tuple[float, float] = FINAL_STAGE_RANGE,
                      env: Any = None, task: Task | None = None) -> SelectorEval:
    """Seeded random-start episodes (as :func:`rmtl.train.eval.evaluate.evaluate_policy_success`) with the
    phase one-hot from ``selector``: 'rule' (the distance rule every step), 'manager' (the greedy
    manager every ``horizon`` steps and at the episode start) or 'none' (a worker without phase input).
    The first ``traces`` episodes keep their per-step active phase, rule phase and the rule's
    measure (pick-and-lift: gripper-cube distance). ``task``: whose env and rule (default: the
    default task)."""
    from rmtl.tasks import get_task

    task = task or get_task()

    if selector not in ("rule", "manager", "none"):
        raise ConfigError(f"selector must be rule, manager or none, got {selector!r}")
    if selector == "manager" and manager is None:
        raise ConfigError("selector 'manager' needs a manager network")
    phase_input = PHASE_KEY in getattr(model.observation_space, "spaces", {})
    num_phases = model.observation_space[PHASE_KEY].shape[0] if phase_input else 0  # the K the worker saw
    own = env is None
    env = env or task.make_env(env_config)
    rule = RulePhaseSelector(task.phases)  # the rule of the env evaluated here
    successes, lengths, episode_success = 0, [], []
    phase_steps, rule_steps = [0] * num_phases, [0] * num_phases
    count = {"agree": 0, "total": 0, "d_agree": 0, "d_total": 0}
    out_traces: list[dict[str, list]] = []
    try:
        env.set_difficulty_range(*difficulty_range)
        for ep in range(int(episodes)):
            tr: dict[str, list] = {"phase": [], "rule": [], "distance": []}
            now = {"t": 0, "phase": 0}

            def act(obs: Any, ep: int = ep, tr: dict[str, list] = tr, now: dict[str, int] = now) -> Any:
                s = np.asarray(obs["observation"], dtype=np.float32)
                r = int(rule(s[None])[0])
                if selector == "manager":
                    if now["t"] % horizon == 0:
                        now["phase"] = int(manager.greedy(s[None])[0])
                        count["d_agree"] += int(now["phase"] == r)
                        count["d_total"] += 1
                else:
                    now["phase"] = r
                phase = now["phase"]
                count["agree"] += int(phase == r)
                count["total"] += 1
                if phase_input:
                    phase_steps[phase] += 1
                    rule_steps[r] += 1
                if ep < traces:
                    tr["phase"].append(phase)
                    tr["rule"].append(r)
                    tr["distance"].append(float(np.asarray(task.phase_measure(s[None])).reshape(-1)[0]))
                o = dict(obs)
                if phase_input:
                    o[PHASE_KEY] = phase_one_hot(phase, num_phases)
                if normalizer is not None:
                    o = normalizer.normalize_obs(o)
                now["t"] += 1
                return model.predict(o, deterministic=deterministic)[0]

            end = run_episode(env, act, seed=int(seed) + ep)
            successes += int(end.success)
            episode_success.append(bool(end.success))
            lengths.append(end.info["step"])
            if ep < traces:
                tr["success"] = [end.success]
                out_traces.append(tr)
    finally:
        if own:
            env.close()
    sr = SuccessRate(selector, float(difficulty_range[1]), int(episodes), successes,
                     float(np.mean(lengths)) if lengths else 0.0)
    lo, hi = sr.wilson_interval()
    res = EvalResult(int(episodes), successes, sr.rate, float(lo), float(hi), sr.mean_length, int(seed),
                     (float(difficulty_range[0]), float(difficulty_range[1])))
    agree, total, d_agree, d_total = count["agree"], count["total"], count["d_agree"], count["d_total"]
    return SelectorEval(res, selector, agree / total if total and selector != "none" else float("nan"),
                        d_agree / d_total if d_total else float("nan"), out_traces, episode_success,
                        phase_steps, rule_steps)

"""Stage 2's arms on the same test episodes (paper Fig. 7), per worker and pooled.

For one worker: the Stage-1 worker with the rule; the Stage-2 run's worker with its learned
manager, with the rule, and with the BC-only manager; the rule-continued control (the worker
trained on with the rule, same compute, no manager); PPO without phase input. Each arm keeps its
per-episode success in seed order, so two arms are compared episode by episode
(:func:`sign_test`), and the manager's agreement with the rule and its share of each phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmtl.train.run.run_dir import BEST, FINAL, RESUME, latest_checkpoint

ARM_LABELS = {"worker_rule": "worker + rule", "worker_manager": "Stage-2 worker + manager",
              "stage2_worker_rule": "Stage-2 worker + rule", "worker_manager_bc": "Stage-2 worker + BC-only manager",
              "rule_continued": "rule-continued + rule", "ppo_no_phase_input": "PPO without phase input"}
"""The arms, in the order tables and plots show them."""


@dataclass(frozen=True)
class WorkerArms:
    """The folders of one worker's arms (a missing one is left out of the comparison)."""

    worker: Path
    """The Stage-1 checkpoint the manager was trained over."""
    stage2: Path
    """The Stage-2 run folder (its latest checkpoint, else its committed ``final/``)."""
    rule_continued: Path | None = None
    """The control's run folder: its best policy on validation if selected, else its latest checkpoint."""
    no_phase: Path | None = None
    """A ``no_phase_input`` run folder (its ``best/`` once selected)."""


def sign_test(a: list[bool], b: list[bool]) -> dict[str, Any]:
    """Exact two-sided sign test of paired outcomes on the episodes where only A or only B succeeded."""
    from scipy.stats import binomtest

    a_only = sum(1 for x, y in zip(a, b) if x and not y)
    b_only = sum(1 for x, y in zip(a, b) if y and not x)
    n = a_only + b_only
    return {"a_only": a_only, "b_only": b_only, "p": float(binomtest(a_only, n, 0.5).pvalue) if n else 1.0}


def _final_or_latest(run: Path) -> Path | None:
    ck = latest_checkpoint(run) if run.is_dir() else None
    return ck or (run / FINAL if (run / FINAL).is_dir() else None)


def _control_policy(run: Path) -> Path | None:
    """The control's policy: the checkpoint best on validation once the run is selected (as every Stage-1
    arm is measured), else its latest checkpoint or resume state (an unfinished control: reported as such)."""
    if (run / "selection.json").is_file() and (run / BEST).is_dir():
        return run / BEST
    return _final_or_latest(run) or ((run / RESUME) if (run / RESUME).is_dir() else None)


def arm_policies(arms: WorkerArms) -> dict[str, Path]:
    """The policy each source of a worker's arms is measured with (a missing or unfinished one left out):
    the worker, the Stage-2 checkpoint, its BC-only manager, the control's policy, the no-phase run's best."""
    out = {"worker": arms.worker}
    s2 = _final_or_latest(arms.stage2)
    if s2 is not None:
        out["stage2"] = s2
    if (arms.stage2 / "manager_bc.pt").is_file():
        out["manager_bc"] = arms.stage2 / "manager_bc.pt"
    rc = _control_policy(arms.rule_continued) if arms.rule_continued else None
    if rc is not None:
        out["rule_continued"] = rc
    if arms.no_phase is not None and (arms.no_phase / "selection.json").is_file():
        out["no_phase"] = arms.no_phase / BEST
    return out


def arm_record(path: Path, ev: Any) -> dict[str, Any]:
    """One arm's numbers: success with its Wilson CI, the per-episode outcomes, agreement and phase steps."""
    r = ev.result
    return {"checkpoint": str(path), "successes": r.successes, "episodes": r.episodes,
            "success_rate": r.success_rate, "ci": [r.ci_low, r.ci_high], "mean_length": r.mean_length,
            "step_agreement_rule": ev.step_agreement, "decision_agreement_rule": ev.decision_agreement,
            "phase_steps": ev.phase_steps, "rule_phase_steps": ev.rule_phase_steps,
            "episode_success": [bool(x) for x in ev.episode_success]}


def evaluate_arms(arms: WorkerArms, episodes: int, seed: int, echo: Any = print) -> dict[str, dict[str, Any]]:
    """Every arm of one worker on ``episodes`` seeded final-stage episodes (seeds ``seed + i``), deterministic."""
    from rmtl.train.eval.evaluate import load_checkpoint
    from rmtl.train.stage2.manager_callback import load_manager
    from rmtl.train.stage2.selector_eval import evaluate_selector
    from rmtl.train.config import EnvConfig

    kw = dict(episodes=episodes, seed=seed, deterministic=True)
    out: dict[str, dict[str, Any]] = {}

    def add(name: str, path: Path, ev: Any) -> None:
        out[name] = arm_record(path, ev)
        echo(f"{name}: {ev.result}")

    policies = arm_policies(arms)
    s2 = policies.get("stage2")
    if s2 is None:
        raise FileNotFoundError(f"{arms.stage2} has no Stage-2 checkpoint or final/; train it first")
    model, meta, norm = load_checkpoint(s2)
    env_cfg = EnvConfig.make(**meta["config"]["env"])
    w, _, wn = load_checkpoint(arms.worker)
    add("worker_rule", arms.worker, evaluate_selector(w, env_cfg, selector="rule", normalizer=wn, **kw))
    manager, horizon = load_manager(s2)
    add("worker_manager", s2, evaluate_selector(model, env_cfg, selector="manager", manager=manager, horizon=horizon,
                                                normalizer=norm, **kw))
    add("stage2_worker_rule", s2, evaluate_selector(model, env_cfg, selector="rule", normalizer=norm, **kw))
    if "manager_bc" in policies:
        bc, _ = load_manager(policies["manager_bc"])
        add("worker_manager_bc", policies["manager_bc"],
            evaluate_selector(model, env_cfg, selector="manager", manager=bc, horizon=horizon, normalizer=norm, **kw))
    if "rule_continued" in policies:
        m, _, n = load_checkpoint(policies["rule_continued"])
        add("rule_continued", policies["rule_continued"],
            evaluate_selector(m, env_cfg, selector="rule", normalizer=n, **kw))
    if "no_phase" in policies:
        m, mt, n = load_checkpoint(policies["no_phase"])
        add("ppo_no_phase_input", policies["no_phase"],
            evaluate_selector(m, EnvConfig.make(**mt["config"]["env"]), selector="none", normalizer=n, **kw))
    return out


def compare(arms: dict[str, dict[str, Any]], a: str, b: str) -> dict[str, Any] | None:
    """Arm ``a`` against ``b`` on the same episodes: the success difference and the sign test (None: one is missing)."""
    if a not in arms or b not in arms:
        return None
    d = arms[a]["success_rate"] - arms[b]["success_rate"]
    return {"a": a, "b": b, "difference": d, **sign_test(arms[a]["episode_success"], arms[b]["episode_success"])}


def pooled(per_worker: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The arms every worker has, their episodes concatenated in worker order (paired across arms)."""
    from rmtl.env.check import SuccessRate

    common = [k for k in ARM_LABELS if per_worker and all(k in arms for arms in per_worker.values())]
    out: dict[str, dict[str, Any]] = {}
    for k in common:
        eps = [x for arms in per_worker.values() for x in arms[k]["episode_success"]]
        rate = SuccessRate(k, 1.0, len(eps), sum(eps), float("nan"))
        lo, hi = rate.wilson_interval()
        steps = [sum(v) for v in zip(*(arms[k]["phase_steps"] for arms in per_worker.values()))]
        rule = [sum(v) for v in zip(*(arms[k]["rule_phase_steps"] for arms in per_worker.values()))]
        out[k] = {"successes": rate.successes, "episodes": rate.episodes, "success_rate": rate.rate,
                  "ci": [lo, hi], "episode_success": eps, "phase_steps": steps,
                  "rule_phase_steps": rule,
                  "step_agreement_rule": _mean([arms[k]["step_agreement_rule"] for arms in per_worker.values()]),
                  "decision_agreement_rule": _mean([arms[k]["decision_agreement_rule"]
                                                    for arms in per_worker.values()])}
    return out


def _mean(values: list[float]) -> float:
    vals = [v for v in values if v == v]  # NaN: an arm without decisions
    return sum(vals) / len(vals) if vals else float("nan")


def phase_shares(arm: dict[str, Any], names: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    """An arm's share of steps per phase and the rule's share on the same states."""
    tot = max(1, sum(arm["phase_steps"]))
    return ({n: arm["phase_steps"][i] / tot for i, n in enumerate(names)},
            {n: arm["rule_phase_steps"][i] / tot for i, n in enumerate(names)})

"""Paper Fig. 7 over several workers: each Stage-2 run's arms (:mod:`rmtl.train.stage2.compare`) on the
same seeded episodes, per worker and pooled, with paired sign tests (``rmtl report --stage 2 RUN RUN ...``).

A worker's arms are evaluated once and kept in the output folder (``arms_<run>.json``) with the
policies and episodes they were measured on; a later report evaluates again only the workers whose
policies changed (a control selected since, a no-phase-input run that landed) or with ``again``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

from rmtl.provenance import portable_path, recorded_path
from rmtl.train.stage2.compare import (
    ARM_LABELS,
    WorkerArms,
    arm_policies,
    compare,
    evaluate_arms,
    phase_shares,
    pooled,
)
from storage.digest import file_sha256
from storage.whole_file import write_file_whole

PAIRS = (("worker_manager", "worker_rule"), ("worker_manager", "rule_continued"),
         ("worker_manager", "stage2_worker_rule"))
"""The paired comparisons reported: the learned manager against each way of going on without it."""
FILES = ("fig7_json", "fig7_csv", "fig7_md", "fig7_png")


def worker_arms(runs: Sequence[Path], rule_continued: Sequence[Path] = (),
                no_phase: Sequence[Path] = ()) -> list[tuple[str, WorkerArms]]:
    """Each Stage-2 run with its worker (from the run's ``config.yaml``) and, in the runs' order, its
    rule-continued control and no-phase-input run; named by the run folder."""
    from rmtl.config import read_yaml_mapping
    from rmtl.errors import ConfigError

    for what, extra in (("--rule-continued", rule_continued), ("--no-phase", no_phase)):
        if extra and len(extra) != len(runs):
            raise ConfigError(f"{what} gives {len(extra)} run(s) for {len(runs)} Stage-2 runs; give one per Stage-2 "
                              f"run, in the same order, or none")
    names = [Path(r).resolve().name for r in runs]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ConfigError(f"two Stage-2 runs are named {dup!r}; each worker is reported by its run folder's name, "
                          f"so pass run folders with different names")
    out = []
    for i, (name, run) in enumerate(zip(names, runs)):
        try:
            worker = read_yaml_mapping(Path(run) / "config.yaml")["worker"]
        except (ConfigError, KeyError, TypeError):
            raise ConfigError(f"{run} has no config.yaml naming its worker, so it is not a Stage-2 run folder; pass "
                              f"the folders written by rmtl train stage2 (not a checkpoint) to report several") from None
        out.append((name, WorkerArms(worker=recorded_path(worker), stage2=Path(run),
                                     rule_continued=Path(rule_continued[i]) if rule_continued else None,
                                     no_phase=Path(no_phase[i]) if no_phase else None)))
    return out


def _measured_on(arms: WorkerArms, episodes: int, seed: int) -> dict[str, Any]:
    """What a kept evaluation must match: the episodes, and each arm's policy file with its size and content
    digest (not its time: a clone of the results must find the evaluations committed beside them)."""
    def stamp(p: Path) -> list[Any]:
        f = p / "model.zip" if p.is_dir() else p
        return [portable_path(p), f.stat().st_size, file_sha256(f)] if f.is_file() else [portable_path(p), None, None]

    return {"episodes": episodes, "seed": seed, "policies": {k: stamp(p) for k, p in arm_policies(arms).items()}}


def workers_report(arms: Sequence[tuple[str, WorkerArms]], out_dir: str | Path, *, episodes: int, seed: int,
                   again: bool = False, echo: Callable[[str], Any] = print) -> dict[str, Path]:
    """Every worker's arms on ``episodes`` seeded episodes (seeds ``seed + i``), per worker and pooled
    (episodes concatenated, paired across arms), the paired sign tests of :data:`PAIRS` and the learned
    manager's share of each phase against the rule's on the same states. Writes ``fig7.json/.csv/.md/.png``."""
    from rmtl.tasks import get_task

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    per_worker: dict[str, dict[str, dict[str, Any]]] = {}
    for name, a in arms:
        kept = out / f"arms_{name}.json"
        key = _measured_on(a, episodes, seed)
        if kept.exists() and not again:
            old = read_kept_arms(kept)
            if old["measured_on"] == key:
                per_worker[name] = old["arms"]
                echo(f"{name}: kept from {kept}")
                continue
        got = evaluate_arms(a, episodes, seed, echo=lambda s, n=name: echo(f"{n}: {s}"))
        for rec in got.values():
            rec["checkpoint"] = portable_path(rec["checkpoint"])
        # whole or not at all: a kill while writing leaves the earlier file, never a truncated one
        write_file_whole(kept, json.dumps({"measured_on": key, "arms": got}, indent=1))
        per_worker[name] = got
    pool = pooled(per_worker)
    rewards = sorted({_reward_name(a.worker) for _, a in arms})
    comps = {f"{x}_vs_{y}": compare(pool, x, y) for x, y in PAIRS}
    phases = list(get_task().micro_tasks.names)
    share, rule_share = phase_shares(pool["worker_manager"], phases) if "worker_manager" in pool else ({}, {})
    brief = {n: {k: {f: v for f, v in a.items() if f != "episode_success"} for k, a in g.items()}
             for n, g in [*per_worker.items(), ("pooled", pool)]}
    info = {"episodes": episodes, "seed": seed, "reward": rewards, "workers": {n: brief[n] for n in per_worker}, "pooled": brief["pooled"],
            "comparisons_pooled": comps, "manager_phase_share": share, "rule_phase_share_same_states": rule_share}
    paths = {k: out / f"fig7.{k.split('_')[1]}" for k in FILES}
    paths["fig7_json"].write_text(json.dumps(info, indent=1))
    with paths["fig7_csv"].open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["worker", "arm", "successes", "episodes", "success_rate", "ci_low", "ci_high",
                     "step_agreement_rule", "decision_agreement_rule", "checkpoint"])
        for n, g in brief.items():
            for k, a in g.items():
                wr.writerow([n, k, a["successes"], a["episodes"], round(a["success_rate"], 4), round(a["ci"][0], 4),
                             round(a["ci"][1], 4), _round(a["step_agreement_rule"]),
                             _round(a["decision_agreement_rule"]), a.get("checkpoint", "")])
    paths["fig7_md"].write_text(_markdown(brief, comps, share, rule_share, episodes, seed, len(per_worker), rewards))
    _plot(brief, paths["fig7_png"], rewards)
    return paths


ARM_FIELDS = {"successes": int, "episodes": int, "success_rate": (int, float), "ci": list,
              "step_agreement_rule": (int, float), "decision_agreement_rule": (int, float), "phase_steps": list,
              "rule_phase_steps": list, "episode_success": list}
"""The fields of a kept arm the report reads, with their JSON types."""


def read_kept_arms(kept: Path) -> dict[str, Any]:
    """A kept ``arms_<run>.json``: a JSON object with ``measured_on`` (an object) and ``arms`` (each arm a
    :data:`ARM_LABELS` name with the fields of :data:`ARM_FIELDS`). Anything else, a truncated file
    included, is one line naming the file and how to measure again (never a traceback, never used)."""
    from rmtl.errors import ConfigError

    fix = (f"delete {kept} (its arms are evaluated again on the next report) or pass --again to evaluate every "
           f"worker again")

    def bad(what: str) -> ConfigError:
        return ConfigError(f"kept evaluation {kept} {what}; {fix}")

    if not kept.is_file():
        raise bad("is not a file")
    try:
        old = json.loads(kept.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise bad("is not text") from None
    except ValueError as e:
        raise bad(f"is not valid JSON (truncated or damaged: {e})") from None
    except OSError as e:
        raise bad(f"cannot be read ({e.strerror or e})") from None
    if not (isinstance(old, dict) and isinstance(old.get("measured_on"), dict) and isinstance(old.get("arms"), dict)):
        raise bad("is not a kept evaluation (a JSON object with 'measured_on' and 'arms' objects)")
    for arm, rec in old["arms"].items():
        problem = _arm_problem(arm, rec)
        if problem:
            raise bad(f"is not a kept evaluation: {problem}")
    return old


def _arm_problem(arm: str, rec: Any) -> str | None:
    """What is wrong with one kept arm (None: nothing)."""
    if arm not in ARM_LABELS:
        return f"unknown arm {arm!r} (known: {', '.join(ARM_LABELS)})"
    if not isinstance(rec, dict):
        return f"arm {arm!r} is not a JSON object"
    for field, types in ARM_FIELDS.items():
        v = rec.get(field)
        if isinstance(v, bool) or not isinstance(v, types):
            return f"arm {arm!r} has no valid {field!r}"
    if len(rec["ci"]) != 2 or not all(isinstance(x, (int, float)) for x in rec["ci"]):
        return f"arm {arm!r} has no valid 'ci' (two numbers)"
    for field in ("episode_success", "phase_steps", "rule_phase_steps"):
        if not all(isinstance(x, (int, float)) for x in rec[field]):
            return f"arm {arm!r} has a {field!r} that is not a list of numbers"
    if len(rec["episode_success"]) != rec["episodes"]:
        return f"arm {arm!r} has {len(rec['episode_success'])} episode outcomes for {rec['episodes']} episodes"
    return None


def _reward_name(worker: Path) -> str:
    """The worker's reward as tables name it: the VLM's registered name, else the reward kind."""
    from rmtl.train.run.run_dir import checkpoint_meta, resolve_checkpoint

    reward = (checkpoint_meta(resolve_checkpoint(worker)).get("config") or {}).get("reward") or {}
    return str(reward.get("model") if reward.get("kind", "vlm") == "vlm" else reward.get("kind"))


def _round(x: float) -> float | str:
    return round(float(x), 4) if x == x else ""


def _markdown(brief: dict, comps: dict, share: dict, rule_share: dict, episodes: int, seed: int, n: int,
              rewards: list[str]) -> str:
    lines = [f"Stage 2 over {n} worker(s), reward {', '.join(rewards)}: every arm on the same {episodes} seeded "
             f"episodes per worker (seeds {seed}+i, final stage, deterministic).", ""]
    for name, g in brief.items():
        lines += [f"## {'pooled over ' + str(n) + ' workers' if name == 'pooled' else name}", "",
                  "| arm | success (95% CI) | agreement with the rule (steps / decisions) |", "|---|---|---|"]
        for k, a in g.items():
            ag, dec = a["step_agreement_rule"], a["decision_agreement_rule"]
            agree = "" if ag != ag else f"{ag:.3f}" + (f" / {dec:.3f}" if dec == dec else "")
            lines.append(f"| {ARM_LABELS[k]} | {a['success_rate']:.3f} ({a['ci'][0]:.3f}-{a['ci'][1]:.3f}) | {agree} |")
        lines.append("")
    lines += ["Pooled paired sign tests (exact, two-sided, on the episodes where only one arm succeeded):", ""]
    lines += [f"- {ARM_LABELS[c['a']]} vs {ARM_LABELS[c['b']]}: difference {c['difference']:+.3f}, only the first "
              f"{c['a_only']}, only the second {c['b_only']}, p = {c['p']:.3g}" for c in comps.values() if c]
    if share:
        lines += ["", "The learned manager's share of steps per phase, pooled (the rule's on the same states): "
                  + ", ".join(f"{k} {share[k]:.3f} ({rule_share[k]:.3f})" for k in share) + "."]
    return "\n".join(lines) + "\n"


def _plot(brief: dict, path: Path, rewards: list[str]) -> None:
    import numpy as np
    from matplotlib.figure import Figure

    groups = list(brief.items())
    arms = [k for k in ARM_LABELS if any(k in g for _, g in groups)]
    fig = Figure(figsize=(9, 4.4))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(arms))
    for j, k in enumerate(arms):
        have = [(i, g[k]) for i, (_, g) in enumerate(groups) if k in g]
        ys = [a["success_rate"] for _, a in have]
        err = [[y - a["ci"][0] for y, (_, a) in zip(ys, have)], [a["ci"][1] - y for y, (_, a) in zip(ys, have)]]
        ax.bar([i + (j - (len(arms) - 1) / 2) * width for i, _ in have], ys, width, yerr=err, capsize=2,
               label=ARM_LABELS[k])
    ax.set_xticks(np.arange(len(groups)), [n for n, _ in groups])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success (95% CI)")
    ax.set_title(f"Fig. 7: Stage 2 over each worker and pooled (reward {', '.join(rewards)})", fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.1))  # below: bars reach the top
    fig.tight_layout()
    fig.savefig(path, dpi=120)

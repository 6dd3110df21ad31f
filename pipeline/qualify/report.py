"""``rmtl qualify``: score the qualification set with one scorer, run the battery, read the map's
verdict, and write the report (JSON, PNG, a plain table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from pipeline.qualify.battery import battery, single_prompt_battery
from pipeline.qualify.configurations import as_phase_columns, configuration
from pipeline.qualify.families import file_slug, load_families, load_trap_scenes, state_set
from pipeline.qualify.learnability_map import load_map, plot_map, reward_verdict
from pipeline.qualify.metrics import early_progress_axes, pooled_metrics, scorer_metrics
from pipeline.qualify.trap import trap_hold, trap_measure
from pipeline.qualify.scores import (
    frames_folder,
    hybrid_scores,
    kind_scores,
    model_scores,
    state_scorer,
    windowed_scores,
)
from rmtl.errors import ConfigError
from rmtl.micro_tasks import micro_task_indices
from storage.whole_file import write_file_whole


def qualify(*, model: str | None, reward: Mapping[str, Any] | None, families_file: str | None, small: bool,
            out_dir: Path, data_dir: Path, seed: int = 0, map_file: Path | None = None, progress: bool = True,
            vlm_micro_tasks: Sequence[str] | None = None, variant: str = "rmtl") -> dict:
    """Score the qualification set with one scorer; returns the report (also written as JSON and PNG).
    ``vlm_micro_tasks`` (with ``model``): qualify the hybrid in which the model scores only those
    micro-tasks and the oracle the rest (reward kind ``hybrid``). ``variant`` (with ``model``): the
    reward configuration a run of that Stage-1 variant would pay (its prompts and views;
    :mod:`pipeline.qualify.configurations`)."""
    from rmtl.tasks import get_task

    if (model is None) == (reward is None):
        raise ConfigError("qualify needs exactly one scorer: --model M (a VLM) or --reward KIND (a state-reading kind)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"--seed must be an integer >= 0 (a run seed), got {seed!r}")
    if map_file is not None and Path(map_file).is_dir():
        inside = Path(map_file) / "learnability_map.json"
        example = f" ({inside})" if inside.is_file() else ""
        raise ConfigError(f"--map {map_file} is a directory; give the map's JSON file{example}, written by "
                          f"'rmtl qualify fit-map'")
    if map_file is not None and not Path(map_file).is_file():
        what = "is not a file" if Path(map_file).exists() else "does not exist"
        raise ConfigError(f"--map {map_file} {what}; give a map file written by 'rmtl qualify fit-map'")
    if vlm_micro_tasks and model is None:
        raise ConfigError("--vlm-micro-tasks qualifies a hybrid of a VLM and the oracle: give the VLM with --model M")
    if variant != "rmtl" and model is None:
        raise ConfigError("--variant picks a VLM reward's configuration: give the VLM with --model M (a state kind "
                          "takes its own config, e.g. --set reward_config.single_score=true)")
    task_name, families = load_families(families_file, small=small)
    scenes = load_trap_scenes(families_file, small=small)
    task = get_task(task_name)
    conf = configuration(variant, task) if model is not None else None  # a bad variant before any rollout
    if vlm_micro_tasks and conf is not None and conf.single_prompt:
        raise ConfigError(f"--vlm-micro-tasks needs the micro-task prompts; variant {variant!r} has one prompt")
    fitted = load_map(map_file or task.learnability_map)  # a map of another schema fails before any rollout
    vlm_phases = micro_task_indices(task.micro_tasks.names, vlm_micro_tasks or (), "--vlm-micro-tasks")  # bad names before any rendering
    size = "small" if small else "full"
    kind, cfg = state_scorer(task, reward, seed) if reward is not None else (None, None)  # bad input before rollouts
    rows = state_set(task_name, families, data_dir / "qualification" / size / "states", progress)
    shaping = None
    if reward is not None:
        scores = kind_scores(kind, rows.states)
        window = getattr(getattr(cfg, "shaping", None), "score_window", 1)
        scores = windowed_scores(scores, rows, window) if scores is not None else None
        shaping = getattr(cfg, "shaping", None)
        label = cfg.kind
        held_out = np.ones(len(rows.states), dtype=bool)
    else:
        stores = frames_folder(data_dir / "qualification" / size, model, task_name, families)
        scores = model_scores(model, task_name, families, stores, rows, progress,
                              single_prompt=conf.single_prompt, views=conf.views)
        label = model if variant == "rmtl" else f"{model} as {variant}"
        if vlm_micro_tasks:
            oracle, _ = state_scorer(task, {"kind": "oracle"}, seed)
            scores = hybrid_scores(scores, kind_scores(oracle, rows.states), vlm_phases)
            label = f"{model} on {'+'.join(vlm_micro_tasks)}, oracle on the rest"
        held_out = ~np.isin(rows.family, [f.name for f in families if model in f.trained_on])
    fams = {f.name: f for f in families}
    one_score = scores is not None and scores.shape[1] == 1
    raw_scores, scores = scores, as_phase_columns(scores, len(task.micro_tasks.names))
    per_family = {name: scorer_metrics(task, scores, rows, rows.family == name) for name in fams}
    groups = sorted({f.group for f in families})
    per_group = {g: scorer_metrics(task, scores, rows,
                                   np.isin(rows.family, [n for n, f in fams.items() if f.group == g]) & held_out)
                 for g in groups}
    pooled = pooled_metrics(task, scores, rows, held_out, seed)
    not_measured = {}
    if vlm_micro_tasks:
        # right_prompt compares the micro-tasks' scores with each other; a hybrid's columns are on two
        # scales (the model's, the oracle's) that its reward never compares, so the map sees it unmeasured.
        not_measured["right_prompt"] = "a hybrid's micro-tasks are scored on two scales"
        for m in (*per_family.values(), *per_group.values(), pooled["value"]):
            m["right_prompt"] = float("nan")
        pooled["ci"]["right_prompt"] = [float("nan")] * 2
    returns = battery(task, None if one_score else scores, rows, shaping)
    if one_score:  # its own reward: one goal, no phase
        returns["scorer"] = single_prompt_battery(raw_scores, rows, shaping)
    bar = returns.get("scorer", returns["rule_only"]).get("expert", float("nan"))
    degenerate = [f.name for f in families if f.group == "behaviour"]
    beats = sorted(n for n in degenerate if returns.get("scorer", {}).get(n, -np.inf) >= bar)
    single: dict[str, Any] = {}
    if model is not None and not vlm_micro_tasks and not one_score:
        # The single-prompt reward on the same model (the paper's baseline): its own battery.
        single_scores = model_scores(model, task_name, families, stores, rows, False, single_prompt=True)
        single_returns = single_prompt_battery(single_scores, rows)
        single = {"battery_single_prompt": single_returns,
                  "single_prompt_behaviours_at_or_above_expert": sorted(
                      n for n in degenerate if single_returns.get(n, -np.inf) >= single_returns.get("expert", np.inf))}
    early = early_progress_axes(task, raw_scores, rows, held_out, shaping,
                                [n for n, f in fams.items() if f.group == "learner"])
    trap = _trap(task, scenes, data_dir / "qualification" / size, one_score, kind, model, conf, progress)
    verdict = trap_hold(reward_verdict(pooled["value"], early, beats, fitted, one_score=one_score), trap)
    report = {"scorer": label, "reward": dict(reward) if reward else None, "model": model, "seed": seed,
              "vlm_micro_tasks": list(vlm_micro_tasks or []),
              "configuration": ({"variant": conf.variant, "single_prompt": conf.single_prompt, "views": list(conf.views)}
                                if conf is not None else {"one_score": one_score}),
              "early_progress": early, "trap": trap,
              "set": {"size": size, "families": {n: {"group": f.group, "episodes": int(f.rollout.get("episodes", 0)),
                                                     "held_out": model not in f.trained_on if model else True}
                                                 for n, f in fams.items()},
                      "rows": int(len(rows.states)), "episodes": int(len(np.unique(rows.episode)))},
              "pooled": pooled, "groups": per_group, "families": per_family, "battery": returns,
              "behaviours_at_or_above_expert": beats, **single, "map": verdict, "not_measured": not_measured}
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = file_slug(label.replace(" as ", "_") if not vlm_micro_tasks else f"{model}_hybrid_{'_'.join(vlm_micro_tasks)}")
    report["files"] = {"json": str(out_dir / f"qualify_{slug}.json"), "png": str(out_dir / f"qualify_{slug}.png")}
    from rmtl.provenance import portable_path

    saved = {**report, "files": {k: portable_path(v) for k, v in report["files"].items()}}
    write_file_whole(report["files"]["json"], json.dumps(saved, indent=1, default=float))
    if task.map_plane is not None:
        plot_map(fitted, {label: pooled["value"]}, Path(report["files"]["png"]), task.map_plane)
    return report


def _trap(task: Any, scenes: Any, root: Path, one_score: bool, kind: Any, model: str | None, conf: Any,
          progress: bool) -> dict[str, Any]:
    """The trap measures of a one-score reward on the set's trap scenes (``pipeline.qualify.trap``): a
    state kind's scores, or the model's single prompt over the configuration's views."""
    if not one_score:
        return {"not_measured": "a phased reward: the rule's phase decides which score pays a pose"}
    if model is None:
        return trap_measure(task, scenes, root / "states", lambda _, r: kind_scores(kind, r.states), progress)
    return trap_measure(task, scenes, root / "states", lambda fams, r: model_scores(
        model, task.name, fams, frames_folder(root, model, task.name, fams), r, progress,
        single_prompt=True, views=conf.views), progress)


def format_report(report: Mapping[str, Any]) -> str:
    """The report as a plain table: pooled metrics with intervals, per group, the battery, the verdict."""
    f = lambda x: "n/a" if x is None or x != x else f"{x:.3f}"  # noqa: E731
    pooled, ci = report["pooled"]["value"], report["pooled"]["ci"]
    lines = [f"qualify {report['scorer']}: {report['set']['rows']} rows, {report['set']['episodes']} episodes "
             f"({report['set']['size']} set)", "",
             f"{'metric':<20}{'pooled':>10}  {'95% CI':<17}" + "".join(f"{g:>14}" for g in report["groups"])]
    for k in pooled:  # the map's axes, in the task's order
        lines.append(f"{k:<20}{f(pooled[k]):>10}  [{f(ci[k][0])}, {f(ci[k][1])}]".ljust(49)
                     + "".join(f"{f(report['groups'][g][k]):>14}" for g in report["groups"]))
    if report.get("early_progress"):
        lines += ["", "early progress (the active score's gain over the first steps of progress: in SD, and in the "
                  "shaper's u):"]
        lines.append("  " + ", ".join(f"{k} {f(v)}" for k, v in report["early_progress"].items()))
    trap = report.get("trap") or {}
    if "trap_ratio" in trap:
        lines += ["", f"trap (coverage scenes: the best-paid resting pose over the done poses' median): ratio "
                  f"{f(trap['trap_ratio'])}, share of the gain {f(trap['trap_share'])} ({trap['resting_scenes']} resting, "
                  f"{trap['done_scenes']} done)"]
    elif trap:
        lines += ["", f"trap: not measured ({trap['not_measured']})"]
    lines += ["", "battery (mean discounted return per family; a behaviour must stay below the noise-free expert):"]
    for label, fams in report["battery"].items():
        lines.append(f"  {label:<10}" + ", ".join(f"{n} {f(v)}" for n, v in fams.items()))
    if report["behaviours_at_or_above_expert"]:
        lines.append("  at or above the expert: " + ", ".join(report["behaviours_at_or_above_expert"]))
    if "battery_single_prompt" in report:
        lines.append("  single prompt: " + ", ".join(f"{n} {f(v)}" for n, v in report["battery_single_prompt"].items()))
        trap = report["single_prompt_behaviours_at_or_above_expert"]
        lines.append("  single prompt, at or above the expert: " + (", ".join(trap) if trap else "none"))
    v = report["map"]
    lines.append("")
    if v["verdict"] == "unmapped" or "p_teaches" not in v:
        lines.append(f"verdict: {v['verdict']} ({v['why']})")
    else:
        lines.append(f"verdict: {v['verdict']} (P(teaches) {f(v['p_teaches'])}, 90% [{f(v['p_interval_90'][0])}, "
                     f"{f(v['p_interval_90'][1])}]; predicted test success {f(v['predicted_test_success'])} "
                     f"(mean of the nearest conditions {', '.join(v['nearest_conditions'])}))" + (f"; {v['why']}" if "why" in v else ""))
    lines += [f"wrote {p}" for p in report["files"].values()]
    return "\n".join(lines)

"""Learning report of Stage-1 runs: the paper's Fig. 5 and Fig. 6 and the final success table.

``stage1_report(run_dirs, out_dir)`` reads each run's ``config.yaml``, ``eval.csv``,
``curriculum.csv`` and latest ``curriculum.json`` and writes:

- ``success_vs_steps.csv/.png`` (Fig. 5): eval success rate on the final stage vs env
  steps, one curve per variant (mean over seeds, band = min..max of seeds when several,
  else the 95% Wilson interval);
- ``curriculum_levels.csv/.png`` (Fig. 6): env steps, episodes and successes per
  curriculum level per run, and the rolling window success rate vs env steps, coloured
  by level;
- ``final_success.csv/.md``: last evaluation of every run (steps, rate, CI, wall time);
- ``success_table.csv/.md``: per run, the final checkpoint and the best checkpoint on
  validation seeds, both on the test seeds, and the mean of the last 5 periodic
  evaluations, each with a 95% CI (rmtl.train.eval.selection; with ``select`` the selection
  is computed or brought up to date, else read from each run's ``selection.json``). A run
  directory with no checkpoints (only its logs, as kept in results/) gets the last-5 mean only.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml

from rmtl.errors import ConfigError
from rmtl.provenance import portable_path, recorded_path
from rmtl.train.run.csv_log import read_csv, write_csv


class RunSkipped(ConfigError):
    """A run directory the report passes over: one of its files cannot be read (the message names it)."""


_FIX = "restore it from a copy, or leave the run out"


def _json_object(path: Path) -> dict[str, Any]:
    """A JSON object file ({} if missing); RunSkipped naming the file if it is not one."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError, OSError) as e:
        raise RunSkipped(f"{path} is not valid JSON ({type(e).__name__}); {_FIX}") from None
    if not isinstance(value, dict):
        raise RunSkipped(f"{path} holds a JSON {type(value).__name__}, not an object; {_FIX}")
    return value


def _csv_rows(path: Path, numeric: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of a log CSV whose ``numeric`` columns are numbers; RunSkipped naming the file if not."""
    try:
        rows = read_csv(path)
    except (UnicodeDecodeError, OSError, __import__("csv").Error) as e:
        raise RunSkipped(f"{path} is not a CSV log written by rmtl ({type(e).__name__}); {_FIX}") from None
    for i, row in enumerate(rows):
        bad = [c for c in numeric if not isinstance(row.get(c), (int, float)) or isinstance(row.get(c), bool)]
        if bad:
            raise RunSkipped(f"{path} is not a CSV log written by rmtl (row {i + 1} has no number in column "
                             f"{bad[0]!r}); {_FIX}")
    return rows


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """What the report needs of one run directory; RunSkipped (one line naming the file) if a
    file it reads is damaged."""
    d = Path(run_dir)
    if not (d / "config.yaml").is_file():
        raise ConfigError(f"{d} is not a Stage-1 run directory (no config.yaml)")
    try:
        config = yaml.safe_load((d / "config.yaml").read_text()) or {}
    except UnicodeDecodeError:
        raise RunSkipped(f"{d / 'config.yaml'} is not a text file (not UTF-8); {_FIX}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise RunSkipped(f"{d / 'config.yaml'} is not valid YAML{at}; {_FIX}") from None
    if not isinstance(config, dict):
        raise RunSkipped(f"{d / 'config.yaml'} holds a YAML {type(config).__name__}, not the run's config "
                         f"(a mapping); {_FIX}")
    if not config:
        raise RunSkipped(f"{d / 'config.yaml'} is empty, not the run's config; {_FIX}")
    lacks = [k for k in ("variant", "seed") if k not in config]
    if lacks:  # else the run would be reported under its folder's name and seed None
        raise RunSkipped(f"{d / 'config.yaml'} has no {' or '.join(lacks)}, so it is not a run config written by "
                         f"rmtl train stage1; {_FIX}")
    curriculum: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    latest = d / "checkpoints" / "latest.txt"
    if latest.is_file():
        ck = d / "checkpoints" / latest.read_text(errors="replace").strip()
        curriculum = _json_object(ck / "curriculum.json")
        meta = _json_object(ck / "meta.json")
        if curriculum and not all(isinstance(curriculum.get(k), list) for k in
                                  ("steps_per_stage", "episodes_per_stage", "successes_per_stage")):
            raise RunSkipped(f"{ck / 'curriculum.json'} is not a curriculum state written by rmtl; {_FIX}")
    summary = _json_object(d / "summary.json")
    _json_object(d / "selection.json")  # the success table reads it
    curriculum_rows = _csv_rows(d / "curriculum.csv", ("timesteps", "window_success_rate", "stage"))
    if not curriculum and curriculum_rows:
        curriculum = curriculum_from_rows(curriculum_rows)  # a kept run without its checkpoints
    return {
        "dir": d, "variant": config["variant"], "seed": config["seed"], "config": config,
        "eval": _csv_rows(d / "eval.csv", ("timesteps", "episodes", "successes", "success_rate", "ci_low",
                                                     "ci_high")),
        "curriculum_rows": curriculum_rows,
        "curriculum": curriculum, "summary": summary, "meta": meta,
    }


def curriculum_from_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Env steps and episodes per curriculum level rebuilt from ``curriculum.csv`` (one row per
    rollout), for runs whose checkpoints (and their ``curriculum.json``) were not kept. Successes per
    level are not in the CSV: None (the rolling success is drawn from the rows themselves)."""
    stages = [int(r["stage"]) for r in rows if isinstance(r.get("stage"), (int, float))]
    if not stages:
        return {}
    n = max(stages) + 1
    steps, episodes = [0] * n, [0] * n
    last_t, last_total = 0, 0
    for r in rows:
        k, t = int(r["stage"]), int(r["timesteps"])
        total = int(float(r.get("total_episodes") or last_total))
        steps[k] += t - last_t
        episodes[k] += total - last_total
        last_t, last_total = t, total
    return {"steps_per_stage": steps, "episodes_per_stage": episodes, "successes_per_stage": [None] * n,
            "from": "curriculum.csv"}


def load_runs(run_dirs: Sequence[str | Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs that can be read, and one line per run passed over (what is wrong, naming the file)."""
    runs, skipped = [], []
    for d in run_dirs:
        try:
            runs.append(load_run(d))
        except RunSkipped as e:
            skipped.append(f"skipped run {d}: {e}")
    # Runs of one variant and seed that differ by a sweep arm are told apart, so tables and curves
    # never pool different arms: by the arm their config records (``sweep_arm``), or for runs made
    # before it was recorded by their folder's name (the sweep's ``<variant>_<arm>_s<seed>``).
    for r in runs:
        if r["config"].get("sweep_arm"):
            r["variant"] = f"{r['variant']}_{r['config']['sweep_arm']}"
    seen = Counter((r["variant"], r["seed"]) for r in runs)
    for r in runs:
        if seen[(r["variant"], r["seed"])] > 1:
            r["variant"] = re.sub(r"_s\d+$", "", Path(r["dir"]).name)
    return runs, skipped


def is_stage2_run(run_dir: Path) -> bool:
    """Whether a run directory holds a Stage-2 run (its config names a Stage-1 ``worker``)."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: not UTF-8
        return False  # load_run names what is wrong with it
    return isinstance(config, dict) and "worker" in config


def stage1_run_dirs(paths: Sequence[str | Path]) -> tuple[list[Path], list[Path]]:
    """The Stage-1 run directories named by ``paths``, and the Stage-2 runs passed over.

    A path is a run directory (it holds ``config.yaml``) or a directory of them, one or two
    levels up (``data/runs/stage1``, ``data/runs``), so ``rmtl report data/runs/*`` works
    with the default layout ``data/runs/stage<k>/<run>``. Stage-2 runs found inside a
    directory are passed over (their report is ``--stage 2``); one named directly is an
    error, as is a directory without any run."""
    if not paths:
        raise ConfigError("rmtl report needs the runs to report: rmtl report RUN_DIR... (Stage-1 run directories, "
                          "or a directory of them such as data/runs/stage1); rmtl report --stage 2 RUN for a Stage-2 run")
    runs: list[Path] = []
    skipped: list[Path] = []
    for p in map(Path, paths):
        if (p / "config.yaml").is_file() or not p.is_dir():
            if p.is_dir() and is_stage2_run(p):
                raise ConfigError(f"{p} is a Stage-2 run; report it with: rmtl report --stage 2 {p}")
            runs.append(p)  # load_run says what is wrong with a path that is no run
            continue
        found = sorted(c.parent for c in p.glob("*/config.yaml")) or sorted(c.parent for c in p.glob("*/*/config.yaml"))
        if not found:
            raise ConfigError(f"{p} is not a Stage-1 run directory (no config.yaml) and holds none; pass run "
                              f"directories written by rmtl train stage1, or a directory of them (data/runs/stage1)")
        for run in found:
            (skipped if is_stage2_run(run) else runs).append(run)
    if not runs:
        raise ConfigError(f"no Stage-1 runs among {', '.join(map(str, paths))} (only Stage-2 runs, which "
                          f"`rmtl report --stage 2 RUN` reports one at a time)" if skipped else
                          f"no Stage-1 runs among {', '.join(map(str, paths))}; pass run directories written by "
                          f"rmtl train stage1, or a directory of them (data/runs/stage1)")
    return list(dict.fromkeys(runs)), skipped


def _label(run: dict[str, Any]) -> str:
    return f"{run['variant']}/s{run['seed']}"


def stage1_report(run_dirs: Sequence[str | Path | dict[str, Any]], out_dir: str | Path, *, select: bool = False,
                  validation_episodes: int = 100, test_episodes: int = 200) -> dict[str, Path]:
    """Write the report files (module docstring) into ``out_dir``; returns name -> path.
    ``select``: evaluate checkpoints for the success table (validation and test seeds,
    ``validation_episodes`` / ``test_episodes``) where ``selection.json`` lacks them."""
    from matplotlib.figure import Figure  # object API: no pyplot, no global backend change

    if not run_dirs:
        raise ConfigError("give at least one Stage-1 run directory")
    runs = [r if isinstance(r, dict) else load_run(r) for r in run_dirs]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}

    # ------------------------------------------------------------ Fig. 5
    rows = [{"variant": r["variant"], "seed": r["seed"], "run": portable_path(r["dir"]), **e}
            for r in runs for e in r["eval"]]
    paths["success_vs_steps_csv"] = write_csv(out / "success_vs_steps.csv", rows)
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    by_variant: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        if r["eval"]:
            by_variant[r["variant"]].append(r)
    for variant, vruns in sorted(by_variant.items()):
        if len(vruns) == 1:
            e = vruns[0]["eval"]
            x = np.array([row["timesteps"] for row in e])
            y = np.array([row["success_rate"] for row in e])
            lo = np.array([row["ci_low"] for row in e])
            hi = np.array([row["ci_high"] for row in e])
            label = variant
        else:
            # Seeds evaluated at the same steps (same eval_every): align on the common steps.
            steps = sorted(set.intersection(*[{row["timesteps"] for row in v["eval"]} for v in vruns]))
            x = np.array(steps)
            ys = np.array([[next(row["success_rate"] for row in v["eval"] if row["timesteps"] == s) for s in steps]
                           for v in vruns])
            y, lo, hi = ys.mean(0), ys.min(0), ys.max(0)
            label = f"{variant} (n={len(vruns)})"
        (line,) = ax.plot(x, y, marker="o", ms=3, label=label)
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval success rate (final stage, random start)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if by_variant:
        ax.legend(fontsize=8)
    ax.set_title("Stage 1: success vs env steps (paper Fig. 5)")
    fig.tight_layout()
    paths["success_vs_steps_png"] = out / "success_vs_steps.png"
    fig.savefig(paths["success_vs_steps_png"], dpi=120)

    # ------------------------------------------------------------ Fig. 6
    level_rows = []
    for r in runs:
        c = r["curriculum"]
        if not c:
            continue
        stages = c.get("stages", [])
        for k in range(len(c["steps_per_stage"])):
            eps, succ = c["episodes_per_stage"][k], c["successes_per_stage"][k]  # succ None: not recorded
            level_rows.append({
                "variant": r["variant"], "seed": r["seed"], "run": portable_path(r["dir"]), "level": k,
                "difficulty": stages[k]["difficulty"] if k < len(stages) else "",
                "env_steps": c["steps_per_stage"][k], "episodes": eps, "successes": succ,
                "success_rate": round(succ / eps, 4) if eps and succ is not None else "",
            })
    paths["curriculum_levels_csv"] = write_csv(out / "curriculum_levels.csv", level_rows)
    fig = Figure(figsize=(11, 4.5))
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    curr_runs = [r for r in runs if r["curriculum"]]
    width = 0.8 / max(len(curr_runs), 1)
    cmap = __import__("matplotlib").colormaps["viridis"]
    for j, r in enumerate(curr_runs):
        steps = r["curriculum"]["steps_per_stage"]
        ax1.bar(np.arange(len(steps)) + j * width - 0.4 + width / 2, steps, width=width, label=_label(r))
    ax1.set_xlabel("curriculum level")
    ax1.set_ylabel("env steps spent")
    ax1.set_title("env steps per level (paper Fig. 6)")
    if curr_runs:
        ax1.legend(fontsize=7)
    n_levels = max((len(r["curriculum"]["steps_per_stage"]) for r in curr_runs), default=5)
    for r in runs:
        cr = r["curriculum_rows"]
        if not cr:
            continue
        x = np.array([row["timesteps"] for row in cr])
        y = np.array([row["window_success_rate"] for row in cr])
        lv = np.array([row["stage"] for row in cr])
        ax2.plot(x, y, color="0.8", lw=0.8, zorder=1)
        ax2.scatter(x, y, c=lv, cmap=cmap, vmin=0, vmax=max(n_levels - 1, 1), s=6, zorder=2)
    ax2.set_xlabel("env steps")
    ax2.set_ylabel("rolling success rate in current level")
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_title("per-level rolling success (colour = level)")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    paths["curriculum_levels_png"] = out / "curriculum_levels.png"
    fig.savefig(paths["curriculum_levels_png"], dpi=120)

    # ------------------------------------------------------------ final table
    table = []
    for r in runs:
        last = r["eval"][-1] if r["eval"] else {}
        table.append({
            "variant": r["variant"], "seed": r["seed"], "env_steps": last.get("timesteps", ""),
            "episodes": last.get("episodes", ""), "success_rate": last.get("success_rate", ""),
            "ci_low": last.get("ci_low", ""), "ci_high": last.get("ci_high", ""),
            "final_level": r["curriculum"].get("curriculum", {}).get("stage_index", "") if r["curriculum"] else "",
            "wall_seconds": r["summary"].get("wall_seconds", r["meta"].get("wall_seconds", "")),
            "run": portable_path(r["dir"]),
        })
    paths["final_success_csv"] = write_csv(out / "final_success.csv", table)
    md = ["| variant | seed | env steps | success | 95% CI | final level | wall s |", "|---|---|---|---|---|---|---|"]
    for t in table:
        rate = f"{t['success_rate']:.3f}" if isinstance(t["success_rate"], float) else str(t["success_rate"])
        ci = f"{t['ci_low']:.3f}-{t['ci_high']:.3f}" if isinstance(t["ci_low"], float) else ""
        wall = f"{t['wall_seconds']:.0f}" if isinstance(t["wall_seconds"], (int, float)) else ""
        md.append(f"| {t['variant']} | {t['seed']} | {t['env_steps']} | {rate} | {ci} | {t['final_level']} | {wall} |")
    paths["final_success_md"] = out / "final_success.md"
    paths["final_success_md"].write_text("\n".join(md) + "\n")
    paths.update(success_table(runs, out, select=select, validation_episodes=validation_episodes,
                               test_episodes=test_episodes))
    return paths


def _ci(rate: Any, lo: Any, hi: Any) -> str:
    return f"{rate:.3f} ({lo:.3f}-{hi:.3f})" if isinstance(rate, float) else "-"


def success_table(runs: Sequence[dict[str, Any]], out: Path, *, select: bool, validation_episodes: int,
                  test_episodes: int) -> dict[str, Path]:
    """``success_table.csv/.md``: final and best-on-validation (both on test seeds) and last-5 success per run."""
    from rmtl.train.eval.selection import LAST_N, find_checkpoints, last_evaluations, load_selection, select_checkpoint

    rows = []
    logs_only = False
    for r in runs:
        # A run kept only as its logs (eval.csv, e.g. from results/) has no checkpoints to select from.
        has_checkpoints = bool(find_checkpoints(r["dir"]))
        logs_only |= not has_checkpoints
        sel = (select_checkpoint(r["dir"], validation_episodes, test_episodes) if select and has_checkpoints
               else load_selection(r["dir"])) or {}
        final, best = sel.get("final", {}), sel.get("best", {})
        ft, bt, bv = final.get("test", {}), best.get("test", {}), best.get("validation", {})
        last = last_evaluations(r["eval"], LAST_N)
        rows.append({
            "variant": r["variant"], "seed": r["seed"], "run": portable_path(r["dir"]),
            "final_steps": final.get("num_timesteps", ""), "final_test_success": ft.get("success_rate", ""),
            "final_test_ci_low": ft.get("ci_low", ""), "final_test_ci_high": ft.get("ci_high", ""),
            "best_steps": best.get("num_timesteps", ""), "best_validation_success": bv.get("success_rate", ""),
            "best_test_success": bt.get("success_rate", ""), "best_test_ci_low": bt.get("ci_low", ""),
            "best_test_ci_high": bt.get("ci_high", ""), "test_episodes": ft.get("episodes", ""),
            "test_seed": ft.get("seed", ""), "validation_episodes": bv.get("episodes", ""),
            "validation_seed": bv.get("seed", ""),
            "last5_n": last.get("n", ""), "last5_mean_success": last.get("mean_success_rate", ""),
            "last5_ci_low": last.get("ci_low", ""), "last5_ci_high": last.get("ci_high", ""),
            "last5_min": last.get("min", ""), "last5_max": last.get("max", ""),
            "last5_steps": f"{last['first_step']}-{last['last_step']}" if last else "",
        })
    paths = {"success_table_csv": write_csv(out / "success_table.csv", rows)}
    md = ["| variant | seed | final (test) | best on validation (test) | best step (validation) "
          f"| mean of last {LAST_N} evals (min-max) |", "|---|---|---|---|---|---|"]
    for t in rows:
        bv = f"{t['best_steps']} ({t['best_validation_success']:.3f})" if isinstance(t["best_validation_success"], float) else "-"
        spread = f" ({t['last5_min']:.2f}-{t['last5_max']:.2f})" if isinstance(t["last5_min"], float) else ""
        md.append(f"| {t['variant']} | {t['seed']} | {_ci(t['final_test_success'], t['final_test_ci_low'], t['final_test_ci_high'])} "
                  f"| {_ci(t['best_test_success'], t['best_test_ci_low'], t['best_test_ci_high'])} | {bv} "
                  f"| {_ci(t['last5_mean_success'], t['last5_ci_low'], t['last5_ci_high'])}{spread} |")
    first = next((t for t in rows if t["test_episodes"] != ""), None)
    md += ["", "Final and best checkpoints on the test seeds"
           + (f" ({first['test_episodes']} episodes from seed {first['test_seed']}; the best checkpoint chosen on "
              f"{first['validation_episodes']} validation episodes from seed {first['validation_seed']})" if first else
              " (not computed: `rmtl report --select` or `rmtl train select RUN`)")
           + (" (runs without checkpoints: their eval.csv only)" if logs_only else "")
           + f"; last {LAST_N}: the mean of the last periodic evaluations (eval.csv), pooled Wilson 95% CI. "
           "Every evaluation: final curriculum stage, deterministic actions."]
    paths["success_table_md"] = out / "success_table.md"
    paths["success_table_md"].write_text("\n".join(md) + "\n")
    return paths


# ============================================================================ Stage 2: behavioural comparison (paper Fig. 7)
PAPER_FIG7 = {"ppo_no_phase_input": 0.89, "worker_rule": 0.94, "worker_manager": 0.98, "single_prompt": 0.0}
"""Random-start success rates of the paper's Fig. 7 (and the manager's agreement with the rule: 0.73)."""
PAPER_AGREEMENT = 0.73


def _num(x: float) -> float | str:
    return round(float(x), 4) if x == x else ""


def _fmt(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "-"


def stage2_report(run_dir: str | Path, out_dir: str | Path, *, no_phase: str | Path | None = None,
                  single_prompt: str | Path | None = None, episodes: int = 100, seed: int = 1_000_000,
                  traces: int = 4, deterministic: bool = True) -> dict[str, Path]:
    """The behavioural comparison of paper Fig. 7 for one Stage-2 run, on the same seeded random starts.

    Rows (each: success rate, 95% Wilson CI, mean length, agreement with the rule):
    (a) ``ppo_no_phase_input``: the ``no_phase`` Stage-1 checkpoint/run (skipped if None);
    (b) ``worker_rule``: the Stage-2 run's final worker with the distance rule;
    (b0) ``stage1_worker_rule``: the Stage-1 worker checkpoint the run started from, with the rule;
    (c) ``worker_manager``: the final worker with the learned manager (greedy, every H steps);
    (c0) ``worker_manager_bc``: the final worker with the BC-only manager (``manager_bc.pt``, if present);
    (d) ``single_prompt``: the ``single_prompt`` Stage-1 checkpoint/run with the rule (skipped if None).

    Writes ``behaviour.csv/.md/.json`` (with the paper's numbers beside ours, BC accuracy and
    training agreement from the run) and ``phase_traces.png`` (the phase the manager and the
    rule pick along the first ``traces`` manager-driven episodes).
    """
    from matplotlib.figure import Figure

    from rmtl.train.config import EnvConfig
    from rmtl.train.eval.evaluate import checkpoint_task, load_checkpoint, resolve_checkpoint
    from rmtl.train.stage2.manager_callback import load_manager
    from rmtl.train.stage2.selector_eval import evaluate_selector

    d = Path(run_dir)
    ck = resolve_checkpoint(d)
    meta = json.loads((ck / "meta.json").read_text())
    env_cfg = EnvConfig.make(**meta["config"]["env"])
    phase_names = checkpoint_task(meta).micro_tasks.names
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manager, horizon = load_manager(ck)
    model, _, norm = load_checkpoint(ck)
    rows: list[dict[str, Any]] = []
    trace_eval = None

    def add(name: str, label: str, source: str, ev: Any) -> None:
        r = ev.result
        rows.append({"policy": name, "label": label, "success_rate": round(r.success_rate, 4),
                     "ci_low": round(r.ci_low, 4), "ci_high": round(r.ci_high, 4), "successes": r.successes,
                     "episodes": r.episodes, "mean_length": round(r.mean_length, 2),
                     "step_agreement_rule": _num(ev.step_agreement), "decision_agreement_rule": _num(ev.decision_agreement),
                     "paper_success": PAPER_FIG7.get(name, ""), "checkpoint": portable_path(source)})

    kw = dict(episodes=episodes, seed=seed, deterministic=deterministic)
    if no_phase is not None:
        m, mt, n = load_checkpoint(no_phase)
        add("ppo_no_phase_input", "(a) PPO without phase input", str(resolve_checkpoint(no_phase)),
            evaluate_selector(m, EnvConfig.make(**mt["config"]["env"]), selector="none", normalizer=n, **kw))
    add("worker_rule", "(b) worker + rule", str(ck), evaluate_selector(model, env_cfg, selector="rule", normalizer=norm, **kw))
    if meta.get("worker"):
        m, _, n = load_checkpoint(recorded_path(meta["worker"]))
        add("stage1_worker_rule", "(b0) Stage-1 worker + rule", str(meta["worker"]),
            evaluate_selector(m, env_cfg, selector="rule", normalizer=n, **kw))
    trace_eval = evaluate_selector(model, env_cfg, selector="manager", manager=manager, horizon=horizon,
                                   normalizer=norm, traces=traces, **kw)
    add("worker_manager", "(c) worker + learned manager", str(ck), trace_eval)
    if (d / "manager_bc.pt").is_file():
        bc_net, _ = load_manager(d / "manager_bc.pt")
        add("worker_manager_bc", "(c0) worker + BC-only manager", str(d / "manager_bc.pt"),
            evaluate_selector(model, env_cfg, selector="manager", manager=bc_net, horizon=horizon, normalizer=norm, **kw))
    if single_prompt is not None:
        m, mt, n = load_checkpoint(single_prompt)
        add("single_prompt", "(d) single-prompt PPO", str(resolve_checkpoint(single_prompt)),
            evaluate_selector(m, EnvConfig.make(**mt["config"]["env"]), selector="rule", normalizer=n, **kw))

    bc = json.loads((d / "bc.json").read_text()) if (d / "bc.json").is_file() else {}
    mrows = read_csv(d / "manager.csv")
    info = {
        "run": portable_path(d), "checkpoint": portable_path(ck), "stage2_env_steps": meta.get("num_timesteps"),
        "wall_seconds": meta.get("wall_seconds"), "episodes": episodes, "seed": seed,
        "bc_heldout_accuracy": bc.get("heldout_accuracy"), "bc_heldout_samples": bc.get("heldout_samples"),
        "train_agreement_rule_last": mrows[-1].get("agreement_rule") if mrows else None,
        "train_step_agreement_rule_last": mrows[-1].get("step_agreement_rule") if mrows else None,
        "eval_step_agreement_rule": trace_eval.step_agreement, "eval_decision_agreement_rule": trace_eval.decision_agreement,
        "paper_agreement": PAPER_AGREEMENT, "rows": rows,
    }
    paths: dict[str, Path] = {"behaviour_csv": write_csv(out / "behaviour.csv", rows)}
    paths["behaviour_json"] = out / "behaviour.json"
    paths["behaviour_json"].write_text(json.dumps(info, indent=1, default=str))
    md = [f"Random-start success ({episodes} seeded episodes from {seed}, final stage U[0.75, 1]); "
          f"Stage-2 run {d.name} at {meta.get('num_timesteps')} env steps.", "",
          "| policy | success | 95% CI | paper | agreement with rule (steps / decisions) |", "|---|---|---|---|---|"]
    for r in rows:
        paper = f"{r['paper_success']:.2f}" if isinstance(r["paper_success"], float) else ""
        md.append(f"| {r['label']} | {r['success_rate']:.3f} | {r['ci_low']:.3f}-{r['ci_high']:.3f} | {paper} | "
                  f"{_fmt(r['step_agreement_rule'])} / {_fmt(r['decision_agreement_rule'])} |")
    acc = bc.get("heldout_accuracy")
    md += ["", f"BC held-out accuracy: {acc:.3f} ({bc.get('heldout_samples')} samples)" if acc is not None else
           "BC held-out accuracy: n/a",
           f"Manager-rule agreement (eval decisions): {trace_eval.decision_agreement:.3f} (paper: ~{PAPER_AGREEMENT:.2f})"]
    paths["behaviour_md"] = out / "behaviour.md"
    paths["behaviour_md"].write_text("\n".join(md) + "\n")

    tr = trace_eval.traces
    fig = Figure(figsize=(9, 1.8 * max(len(tr), 1) + 0.6))
    for j, t in enumerate(tr):
        ax = fig.add_subplot(max(len(tr), 1), 1, j + 1)
        x = np.arange(len(t["phase"]))
        ax.step(x, t["rule"], where="post", color="0.5", lw=2.5, alpha=0.6, label="rule")
        ax.step(x, t["phase"], where="post", color="C3", lw=1.4, label="learned manager")
        ax2 = ax.twinx()
        ax2.plot(x, t["distance"], color="C0", lw=0.8, alpha=0.6)
        ax2.set_ylabel("gripper-cube m", fontsize=7, color="C0")
        ax.set_yticks(range(len(phase_names)), phase_names, fontsize=7)
        ax.set_ylim(-0.3, len(phase_names) - 0.7)
        ax.set_title(f"episode {j} ({'success' if t['success'][0] else 'failure'})", fontsize=8)
        if j == 0:
            ax.legend(fontsize=7, loc="upper left")
    if tr:
        fig.axes[0].figure.supxlabel("env step")
    fig.tight_layout()
    paths["phase_traces_png"] = out / "phase_traces.png"
    fig.savefig(paths["phase_traces_png"], dpi=110)
    return paths

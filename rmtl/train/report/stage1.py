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
  directory with no checkpoints (only its logs, as kept in results/) gets the last-5 mean only;
- ``reward_trace.csv/.png`` for runs with a VLM reward: what the learner was paid over training
  (the active phase's score, its tracking band, ``u``, the share of steps per phase;
  rmtl.train.report.reward_trace).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from rmtl.errors import ConfigError
from rmtl.provenance import portable_path
from rmtl.train.report.reward_trace import reward_trace
from rmtl.train.report.runs import load_run
from rmtl.train.run.csv_log import write_csv


def _label(run: dict[str, Any]) -> str:
    return f"{run['variant']}/s{run['seed']}"


def stage1_report(run_dirs: Sequence[str | Path | dict[str, Any]], out_dir: str | Path, *, select: bool = False,
                  validation_episodes: int = 100, test_episodes: int = 200) -> dict[str, Path]:
    """Write the report files (module docstring) into ``out_dir``; returns name -> path.
    ``select``: evaluate checkpoints for the success table (validation and test seeds,
    ``validation_episodes`` / ``test_episodes``) where ``selection.json`` lacks them."""
    if not run_dirs:
        raise ConfigError("give at least one Stage-1 run directory")
    runs = [r if isinstance(r, dict) else load_run(r) for r in run_dirs]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    paths.update(success_vs_steps(runs, out))
    paths.update(curriculum_levels(runs, out))
    paths.update(final_success(runs, out))
    paths.update(success_table(runs, out, select=select, validation_episodes=validation_episodes,
                               test_episodes=test_episodes))
    paths.update(reward_trace(runs, out))
    return paths


def _variant_curve(variant: str, vruns: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """(x, y, low, high, label) of one variant's curve: one run with its Wilson interval, several
    seeds as their mean with the min..max band."""
    if len(vruns) == 1:
        e = vruns[0]["eval"]
        x = np.array([row["timesteps"] for row in e])
        y = np.array([row["success_rate"] for row in e])
        lo = np.array([row["ci_low"] for row in e])
        hi = np.array([row["ci_high"] for row in e])
        return x, y, lo, hi, variant
    # Seeds evaluated at the same steps (same eval_every): align on the common steps.
    steps = sorted(set.intersection(*[{row["timesteps"] for row in v["eval"]} for v in vruns]))
    ys = np.array([[next(row["success_rate"] for row in v["eval"] if row["timesteps"] == s) for s in steps]
                   for v in vruns])
    return np.array(steps), ys.mean(0), ys.min(0), ys.max(0), f"{variant} (n={len(vruns)})"


def success_vs_steps(runs: Sequence[dict[str, Any]], out: Path) -> dict[str, Path]:
    """Fig. 5: ``success_vs_steps.csv/.png``."""
    from matplotlib.figure import Figure  # object API: no pyplot, no global backend change

    paths: dict[str, Path] = {}
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
        x, y, lo, hi, label = _variant_curve(variant, vruns)
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
    return paths


def _level_rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Env steps, episodes and successes per curriculum level per run."""
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
    return level_rows


def curriculum_levels(runs: Sequence[dict[str, Any]], out: Path) -> dict[str, Path]:
    """Fig. 6: ``curriculum_levels.csv/.png``."""
    from matplotlib.figure import Figure

    paths: dict[str, Path] = {}
    paths["curriculum_levels_csv"] = write_csv(out / "curriculum_levels.csv", _level_rows(runs))
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
    return paths


def final_success(runs: Sequence[dict[str, Any]], out: Path) -> dict[str, Path]:
    """``final_success.csv/.md``: the last evaluation of every run."""
    paths: dict[str, Path] = {}
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

"""What the learner was paid, over training: the shaped VLM reward's terms from a run's progress logs.

A VLM reward that does not teach usually shows why in its own numbers: the active phase's score
pinned inside a narrow tracking band (so a lift moves ``u`` by noise-sized steps), ``u`` high while
the learner farms a pose, or all steps in one phase. ``reward_trace(runs, out)`` reads every
``progress_*.csv`` of each Stage-1 run (a resumed run logs to several; the later file wins for a
step logged twice), averages each logged rollout's means over windows of ``window`` env steps and
writes:

- ``reward_trace.csv``: per run and window, the mean VLM score of the active phase (``score``), the
  tracking bounds ``low`` / ``high`` and their ``band``, the normalised level ``u``, the shaped
  reward, the share of steps in each phase (``frac_<phase>``), the training success and the
  curriculum level;
- ``reward_trace.png``: one panel per run: the band (shaded), the score and ``u``, and the share of
  steps in the phase that holds most of them (dotted), against env steps.

Every value is a mean over the rollout's steps (``rmtl.train.callbacks``); ``low`` and ``high`` are
the bounds of the phase active at each step. Runs logged without a VLM reward (oracle, rule-only)
have no ``reward/score`` and are passed over.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from rmtl.train.run.csv_log import PROGRESS_STEP, progress_rows, write_csv

TERMS = {"score": "reward/score", "low": "reward/low", "high": "reward/high", "u": "reward/u",
         "reward": "reward/reward", "train_success": "rollout/success_rate", "level": "curriculum/stage"}
"""Columns of the trace and the progress-log key each is the mean of."""
_PHASE = "phase/frac_"


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and np.isfinite(v) else None


def _mean(group: Sequence[dict[str, Any]], key: str) -> float | str:
    vals = [v for v in (_number(r.get(key)) for r in group) if v is not None]
    return round(float(np.mean(vals)), 4) if vals else ""


def _column(rows: Sequence[dict[str, Any]], name: str) -> np.ndarray:
    return np.array([r[name] if isinstance(r[name], float) else np.nan for r in rows])


def trace_rows(run: dict[str, Any], window: int) -> list[dict[str, Any]]:
    """Window means of the reward terms of one run (``load_run``'s dict); no rows without a VLM score."""
    rows = [r for r in progress_rows(run["dir"]) if _number(r.get(TERMS["score"])) is not None]
    phases = sorted({k[len(_PHASE):] for r in rows for k in r if k.startswith(_PHASE)})
    bins: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        step = int(r[PROGRESS_STEP])
        bins[-(-step // window) * window].append(r)  # the window ending at or after the step
    out = []
    for end in sorted(bins):
        group = bins[end]
        row: dict[str, Any] = {"variant": run["variant"], "seed": run["seed"], "env_steps": end,
                               "rollouts": len(group)}
        row.update({name: _mean(group, key) for name, key in TERMS.items()})
        if isinstance(row["low"], float) and isinstance(row["high"], float):
            row["band"] = round(row["high"] - row["low"], 4)
        else:
            row["band"] = ""
        row.update({f"frac_{p}": _mean(group, _PHASE + p) for p in phases})
        out.append(row)
    return out


def reward_trace(runs: Sequence[dict[str, Any]], out_dir: str | Path, *, window: int = 20_000) -> dict[str, Path]:
    """Write ``reward_trace.csv`` / ``.png`` (module docstring) for the runs that logged a VLM score;
    returns name -> path (empty when none did)."""
    from matplotlib.figure import Figure  # object API: no pyplot, no global backend change

    traced = [(run, rows) for run in runs if (rows := trace_rows(run, window))]
    if not traced:
        return {}
    out = Path(out_dir)
    paths = {"reward_trace_csv": write_csv(out / "reward_trace.csv",
                                           [row for _, rows in traced for row in rows])}
    cols = min(3, len(traced))
    nrows = -(-len(traced) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * nrows))
    for i, (run, rows) in enumerate(traced):
        ax = fig.add_subplot(nrows, cols, i + 1)
        x = np.array([r["env_steps"] for r in rows]) / 1000
        ax.fill_between(x, _column(rows, "low"), _column(rows, "high"), color="tab:blue", alpha=0.2, label="tracking band")
        ax.plot(x, _column(rows, "score"), color="tab:blue", label="score (active phase)")
        ax.plot(x, _column(rows, "u"), color="tab:orange", ls="--", label="u")
        fracs = [k for k in rows[0] if k.startswith("frac_")]
        if fracs:
            main = max(fracs, key=lambda k: np.nansum(_column(rows, k)))
            ax.plot(x, _column(rows, main), color="0.4", ls=":", label=f"share of steps: {main[len('frac_'):]}")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{run['variant']}/s{run['seed']}", fontsize=9)
        ax.set_xlabel("env steps (thousands)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
    fig.suptitle(f"What the learner was paid (means over {window // 1000}k-step windows)", fontsize=10)
    fig.tight_layout()
    paths["reward_trace_png"] = out / "reward_trace.png"
    fig.savefig(paths["reward_trace_png"], dpi=110)
    return paths

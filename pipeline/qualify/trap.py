"""The trap share of a one-score reward: does some pose that has not begun the task's last step earn
nearly what doing it earns? (docs/reward_quality.md, "Poses no family visits")

The qualification families pass through the poses their policies take; a learner can settle in a
pose none of them visits. The task's coverage scenes (set directly, not by a policy) cover the
workspace instead (the qualification set's ``trap_scenes``): the task splits them into resting and
done poses (``Task.trap_poses``). The trap share is the best-paid resting scene's gain over the
resting median as a share of the done median's gain: unchanged by any affine map of the score, as the
shaped reward is (its tracking bounds rescale the score). The trap ratio (best resting over done
median) is reported beside it. The scenes are rolled out once per set size and rendered once per
renderer, like a qualification family.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np

from pipeline.qualify.families import Family, StateSet, state_set

TRAP_HOLD = 0.90
"""A one-score configuration whose trap share reaches this is held at "does not teach"."""


def trap_rows(task: Any, scenes: Family, cache_dir: Path, progress: bool = False) -> tuple[StateSet, np.ndarray, np.ndarray]:
    """The coverage scenes' rows (states cached in ``cache_dir``) and the task's (resting, done) masks."""
    rows = state_set(task.name, [scenes], cache_dir, progress)
    resting, done = task.trap_poses(rows.states, rows.episode)
    return rows, np.asarray(resting, dtype=bool), np.asarray(done, dtype=bool)


def trap_axes(scores: np.ndarray, resting: np.ndarray, done: np.ndarray) -> dict[str, Any]:
    """The trap measures of one score per scene [N] (or [N, 1]): ``trap_ratio`` (the best-paid resting
    scene over the done scenes' median), ``trap_share`` (that scene's gain over the resting median as
    a share of the done median's: unchanged by any affine map of the score), the numbers behind them
    and the best-paid resting scene's row. NaN where either side holds no scene."""
    s = np.asarray(scores, dtype=np.float64).reshape(len(resting), -1)[:, 0]
    if not resting.any() or not done.any():
        nan = float("nan")
        return {"trap_ratio": nan, "trap_share": nan, "done_median": nan, "resting_median": nan, "resting_max": nan,
                "resting_scenes": int(resting.sum()), "done_scenes": int(done.sum()), "worst_row": None}
    done_median, rest = float(np.median(s[done])), s[resting]
    rest_median, rest_max = float(np.median(rest)), float(rest.max())
    gain = done_median - rest_median
    return {"trap_ratio": rest_max / done_median if done_median > 0 else float("nan"),
            "trap_share": (rest_max - rest_median) / gain if gain > 0 else float("inf"),
            "done_median": done_median, "resting_median": rest_median, "resting_max": rest_max,
            "resting_scenes": int(resting.sum()), "done_scenes": int(done.sum()),
            "worst_row": int(np.flatnonzero(resting)[int(np.argmax(rest))])}


def trap_measure(task: Any, scenes: Family | None, cache_dir: Path,
                 score: Callable[[list[Family], StateSet], np.ndarray | None], progress: bool = False) -> dict[str, Any]:
    """The trap measures of the one score ``score([scenes], rows)`` gives the coverage scenes (a state
    kind's scores, or a VLM's from stores it renders); ``{"not_measured": why}`` where there is nothing
    to measure."""
    if scenes is None:
        return {"not_measured": "the qualification set names no trap_scenes"}
    if task.trap_poses is None or task.coverage_scene is None:
        return {"not_measured": f"task {task.name!r} defines no coverage scenes with trap poses"}
    rows, resting, done = trap_rows(task, scenes, cache_dir, progress)
    scores = score([scenes], rows)
    if scores is None:
        return {"not_measured": "the reward has no score (rule-only)"}
    return trap_axes(scores, resting, done)


def trap_hold(verdict: dict[str, Any], trap: dict[str, Any]) -> dict[str, Any]:
    """The verdict held at "does not teach" when the trap share reaches :data:`TRAP_HOLD` (its P kept)."""
    share = trap.get("trap_share")
    if share is None or not share >= TRAP_HOLD:
        return verdict
    why = (f"the best-paid resting pose earns {share:.2f} of the done poses' gain over resting ones (trap share >= "
           f"{TRAP_HOLD}): a learner can settle there without doing the task")
    return {**verdict, "verdict": "does not teach", "held": "trap",
            "why": f"{why}; {verdict['why']}" if verdict.get("why") else why}


__all__ = ["TRAP_HOLD", "trap_axes", "trap_hold", "trap_measure", "trap_rows"]

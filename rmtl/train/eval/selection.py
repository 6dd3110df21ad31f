"""Evaluation that survives PPO's swings: the best checkpoint chosen on validation seeds
and reported on disjoint test seeds, the final checkpoint on the same test seeds, and the
mean of the last periodic evaluations.

Seed ranges (episode i of a range resets with its first seed + i; every evaluation runs
on the final curriculum stage, start difficulty U[0.75, 1], deterministic actions):

=========== ========================================== =====================================
purpose     first seed                                  used for
=========== ========================================== =====================================
periodic    ``Stage1Config.eval_seed`` (1,000,000)      ``eval.csv`` during training
validation  :data:`VALIDATION_SEED` (2,000,000)         choosing the best checkpoint
test        :data:`TEST_SEED` (3,000,000)               reporting the chosen and the final one
=========== ========================================== =====================================

A range holds at most :data:`SEED_BLOCK` episodes, so the three never overlap; a run whose
periodic range would overlap the others is refused. Results go to ``selection.json`` in
the run directory; a later call evaluates only the checkpoints (and test candidates) that
are new, so it can follow a run while it trains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
import yaml

from rmtl.env.check import SuccessRate
from rmtl.errors import ConfigError
from rmtl.provenance import portable_path
from storage.digest import file_sha256
from storage.whole_file import write_file_whole

VALIDATION_SEED = 2_000_000
TEST_SEED = 3_000_000
SEED_BLOCK = 1_000_000
"""Most episodes one purpose may use: keeps the periodic, validation and test seeds disjoint."""
LAST_N = 5
"""Periodic evaluations averaged for the 'last 5' figure."""
SELECTION_FILE = "selection.json"


def check_seed_ranges(ranges: dict[str, tuple[int, int]]) -> None:
    """Refuse ranges ``name -> (first seed, episodes)`` that exceed SEED_BLOCK or overlap."""
    for name, (_, n) in ranges.items():
        if not 0 < n <= SEED_BLOCK:
            raise ConfigError(f"{name} episodes must be in 1..{SEED_BLOCK}, got {n}")
    items = sorted(ranges.items(), key=lambda kv: kv[1][0])
    for (a, (sa, na)), (b, (sb, _)) in zip(items, items[1:]):
        if sa + na > sb:
            raise ConfigError(f"{a} seeds {sa}..{sa + na - 1} overlap the {b} seeds from {sb}; "
                              "evaluation seed ranges must be disjoint")


def find_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoint directories of a Stage-1 run (``checkpoints/step_*`` with a model.zip), by step; may be empty."""
    root = Path(run_dir) / "checkpoints"
    return sorted(p for p in root.glob("step_*") if (p / "model.zip").is_file())


def run_checkpoints(run_dir: str | Path) -> list[Path]:
    """:func:`find_checkpoints`, refusing a run that has none."""
    cks = find_checkpoints(run_dir)
    if not cks:
        raise ConfigError(f"{run_dir} has no checkpoints (checkpoints/step_*/model.zip)")
    return cks


def pooled(successes: int, episodes: int) -> dict[str, float]:
    """Rate and 95% Wilson interval of pooled counts."""
    lo, hi = SuccessRate("pooled", 1.0, int(episodes), int(successes), 0.0).wilson_interval()
    return {"success_rate": successes / episodes if episodes else float("nan"), "ci_low": lo, "ci_high": hi}


def last_evaluations(eval_rows: Sequence[dict[str, Any]], n: int = LAST_N) -> dict[str, Any]:
    """Mean success rate of the last ``n`` periodic evaluations (rows of ``eval.csv``).

    The interval is the Wilson interval of the pooled successes and episodes; it treats
    the n x episodes outcomes as independent, which the shared seeds make slightly
    optimistic. Also the min and max of the n rates and the steps they span.
    """
    rows = list(eval_rows)[-n:]
    if not rows:
        return {}
    rates = [float(r["success_rate"]) for r in rows]
    succ, eps = sum(int(r["successes"]) for r in rows), sum(int(r["episodes"]) for r in rows)
    ci = pooled(succ, eps)
    return {"n": len(rows), "mean_success_rate": float(np.mean(rates)), "ci_low": ci["ci_low"],
            "ci_high": ci["ci_high"], "min": min(rates), "max": max(rates), "successes": succ, "episodes": eps,
            "first_step": int(rows[0]["timesteps"]), "last_step": int(rows[-1]["timesteps"])}


def _stamp(ck: Path) -> str:
    """The content digest of a checkpoint's model.zip: a run started over in the same directory
    writes new weights under the same step names, and their old results must not be reused; the
    same weights copied elsewhere (a sync, a clone) keep theirs."""
    return file_sha256(ck / "model.zip")


def _params(validation_episodes: int, test_episodes: int, validation_seed: int, test_seed: int) -> dict[str, int]:
    return {"validation_episodes": int(validation_episodes), "test_episodes": int(test_episodes),
            "validation_seed": int(validation_seed), "test_seed": int(test_seed)}


def select_checkpoint(run_dir: str | Path, validation_episodes: int = 100, test_episodes: int = 200, *,
                      validation_seed: int = VALIDATION_SEED, test_seed: int = TEST_SEED, device: str = "cpu",
                      verbose: bool = False) -> dict[str, Any]:
    """Evaluate every checkpoint of a run on the validation seeds, pick the best (highest
    validation success; ties go to the later checkpoint), and evaluate it and the final
    checkpoint on the test seeds. Writes and returns ``selection.json``'s content."""
    from rmtl.train.eval.evaluate import evaluate_checkpoint

    run = Path(run_dir)
    cfg = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else {}
    periodic = (int(cfg.get("eval_seed", 1_000_000)), int(cfg.get("eval_episodes", 50)))
    check_seed_ranges({"periodic": periodic, "validation": (validation_seed, validation_episodes),
                       "test": (test_seed, test_episodes)})
    params = _params(validation_episodes, test_episodes, validation_seed, test_seed)
    path = run / SELECTION_FILE
    old = json.loads(path.read_text()) if path.is_file() else {}
    same = old.get("params") == params
    cks = run_checkpoints(run)
    stamps = {ck.name: _stamp(ck) for ck in cks}
    # Reuse an earlier evaluation only of the same checkpoint files: one without a stamp (written when a
    # kept run finished, rmtl.train.eval.committed) cannot be matched to them and is evaluated again.
    val_done = {v["checkpoint"]: v for v in old.get("validation", [])
                if same and v.get("stamp") is not None and stamps.get(v["checkpoint"]) == v["stamp"]}
    test_done = {k: v for k, v in old.get("test", {}).items()
                 if same and v.get("stamp") is not None and stamps.get(k) == v["stamp"]}

    def result(res: Any, name: str) -> dict[str, Any]:
        return {"checkpoint": name, "stamp": stamps[name], **{k: v for k, v in res.to_dict().items() if k != "checkpoint"}}

    validation = []
    for ck in cks:
        if ck.name not in val_done:
            res = evaluate_checkpoint(ck, validation_episodes, validation_seed, device=device)
            val_done[ck.name] = result(res, ck.name)
            if verbose:
                print(f"validation {ck.name}: {res}")
        validation.append(val_done[ck.name])
    best = max(validation, key=lambda v: (v["success_rate"], v["num_timesteps"] or 0))
    final = validation[-1]
    for name in dict.fromkeys((best["checkpoint"], final["checkpoint"])):
        if name not in test_done:
            res = evaluate_checkpoint(run / "checkpoints" / name, test_episodes, test_seed, device=device)
            test_done[name] = result(res, name)
            if verbose:
                print(f"test {name}: {res}")
    from rmtl.train.run.csv_log import read_csv

    result = {
        "run": portable_path(run), "params": params,
        "seed_ranges": {"periodic": list(periodic), "validation": [validation_seed, validation_episodes],
                        "test": [test_seed, test_episodes]},
        "validation": validation, "test": test_done,
        "best": {"checkpoint": best["checkpoint"], "num_timesteps": best["num_timesteps"],
                 "validation": best, "test": test_done[best["checkpoint"]]},
        "final": {"checkpoint": final["checkpoint"], "num_timesteps": final["num_timesteps"],
                  "test": test_done[final["checkpoint"]]},
        "last_periodic": last_evaluations(read_csv(run / "eval.csv")),
    }
    write_file_whole(path, json.dumps(result, indent=1, default=str))  # the test's outcome, never half-written
    return result


def load_selection(run_dir: str | Path) -> dict[str, Any] | None:
    """``selection.json`` of a run, or None when it has not been computed."""
    p = Path(run_dir) / SELECTION_FILE
    return json.loads(p.read_text()) if p.is_file() else None

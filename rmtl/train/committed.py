"""What a run keeps beside its logs so that it survives a stop and a new machine.

- ``resume/``: a copy of the newest checkpoint (policy, optimiser, step count, curriculum and
  callback state, normaliser; a few MB). A run directory without ``checkpoints/`` resumes from
  it with the same command, and it is deleted when the run finishes.
- ``best/``: the checkpoint best on the validation seeds so far (weights and normaliser, the
  optimiser replaced by a fresh one: under 1 MB), chosen as each checkpoint is written, with
  every validation result in ``validation.csv``. ``rmtl eval <run>/best`` evaluates it.

Checkpoints themselves are not kept with the results (they are large); the validation of
each one is done when it is written, so losing them loses no selection.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from rmtl.train.csv_log import append_csv, read_csv
from rmtl.train.run_dir import RESUME, resume_checkpoint
from rmtl.train.selection import VALIDATION_SEED

__all__ = ["BEST", "RESUME", "VALIDATION_CSV", "drop_resume_state", "keep_resume_state", "resume_checkpoint",
           "validate_and_keep_best"]

BEST = "best"
VALIDATION_CSV = "validation.csv"
_FILES = ("model.zip", "meta.json", "curriculum.json", "vecnormalize.json", "reward_state.json")


def _copy_checkpoint(ck: Path, dest: Path) -> None:
    """Replace ``dest`` with the checkpoint's files (written beside it, then renamed)."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in _FILES:
        if (ck / name).is_file():
            shutil.copy2(ck / name, tmp / name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def keep_resume_state(run_dir: Path, ck: Path) -> None:
    """Copy the newest checkpoint to ``resume/``."""
    _copy_checkpoint(ck, Path(run_dir) / RESUME)


def drop_resume_state(run_dir: Path) -> None:
    """A finished run needs no resume state."""
    shutil.rmtree(Path(run_dir) / RESUME, ignore_errors=True)


def validate_and_keep_best(run_dir: Path, ck: Path, episodes: int = 100, seed: int = VALIDATION_SEED,
                           device: str = "cpu") -> dict[str, Any]:
    """Evaluate checkpoint ``ck`` on the validation seeds, log it to ``validation.csv`` and, when it is
    the best so far (ties go to the later one), write it to ``best/`` without optimiser state."""
    from rmtl.train.evaluate import evaluate_checkpoint

    run_dir = Path(run_dir)
    res = evaluate_checkpoint(ck, episodes, seed, device=device)
    rows = [r for r in read_csv(run_dir / VALIDATION_CSV) if int(r["timesteps"]) < int(res.num_timesteps or 0)]
    best_before = max((float(r["success_rate"]) for r in rows), default=-1.0)
    row = {"timesteps": int(res.num_timesteps or 0), "episodes": res.episodes, "successes": res.successes,
           "success_rate": round(res.success_rate, 4), "ci_low": round(res.ci_low, 4),
           "ci_high": round(res.ci_high, 4), "seed": seed, "checkpoint": ck.name}
    append_csv(run_dir / VALIDATION_CSV, row)
    if res.success_rate >= best_before:
        _write_policy(ck, run_dir / BEST, device)
    return row


def _write_policy(ck: Path, dest: Path, device: str) -> None:
    """``dest`` = the checkpoint with a fresh optimiser (no moment estimates): the weights and normaliser."""
    from stable_baselines3 import PPO

    _copy_checkpoint(ck, dest)
    (dest / "curriculum.json").unlink(missing_ok=True)
    (dest / "reward_state.json").unlink(missing_ok=True)
    model = PPO.load(dest / "model.zip", device=device)
    model.policy.optimizer = type(model.policy.optimizer)(model.policy.parameters(),
                                                          **model.policy.optimizer_kwargs,
                                                          lr=model.policy.optimizer.param_groups[0]["lr"])
    model.save(dest / "model.zip")

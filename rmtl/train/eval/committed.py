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

from rmtl.provenance import portable_path
from rmtl.train.run.csv_log import append_csv, read_csv
from rmtl.train.run.run_dir import BEST, RESUME, resume_checkpoint
from rmtl.train.eval.selection import SELECTION_FILE, TEST_SEED, VALIDATION_SEED, last_evaluations
from storage.whole_file import dir_written_whole, write_file_whole

__all__ = ["BEST", "RESUME", "VALIDATION_CSV", "drop_resume_state", "keep_resume_state", "resume_checkpoint",
           "select_kept_run", "validate_and_keep_best", "write_policy", "write_policy_into"]

VALIDATION_CSV = "validation.csv"
_RESUME_FILES = ("model.zip", "meta.json", "curriculum.json", "vecnormalize.json", "reward_state.json")
_POLICY_FILES = ("model.zip", "meta.json", "vecnormalize.json")
"""A policy without the training state that only a resumed run needs (curriculum, reward shaping)."""


def _copy_files(ck: Path, into: Path, names: tuple[str, ...]) -> None:
    for name in names:
        if (ck / name).is_file():
            shutil.copy2(ck / name, into / name)


def keep_resume_state(run_dir: Path, ck: Path) -> None:
    """Copy the newest checkpoint to ``resume/`` (filled beside it, then renamed into place)."""
    with dir_written_whole(Path(run_dir) / RESUME) as into:
        _copy_files(ck, into, _RESUME_FILES)


def drop_resume_state(run_dir: Path) -> None:
    """A finished run needs no resume state."""
    shutil.rmtree(Path(run_dir) / RESUME, ignore_errors=True)


def validate_and_keep_best(run_dir: Path, ck: Path, episodes: int = 100, seed: int = VALIDATION_SEED,
                           device: str = "cpu") -> dict[str, Any]:
    """Evaluate checkpoint ``ck`` on the validation seeds, log it to ``validation.csv`` and, when it is
    the best so far (ties go to the later one), write it to ``best/`` without optimiser state."""
    from rmtl.train.eval.evaluate import evaluate_checkpoint

    run_dir = Path(run_dir)
    res = evaluate_checkpoint(ck, episodes, seed, device=device)
    rows = [r for r in read_csv(run_dir / VALIDATION_CSV) if int(r["timesteps"]) < int(res.num_timesteps or 0)]
    best_before = max((float(r["success_rate"]) for r in rows), default=-1.0)
    row = {"timesteps": int(res.num_timesteps or 0), "episodes": res.episodes, "successes": res.successes,
           "success_rate": round(res.success_rate, 4), "ci_low": round(res.ci_low, 4),
           "ci_high": round(res.ci_high, 4), "seed": seed, "checkpoint": ck.name}
    append_csv(run_dir / VALIDATION_CSV, row)
    if res.success_rate >= best_before:
        write_policy(ck, run_dir / BEST, device)
    return row


def write_policy(ck: Path, dest: Path, device: str) -> None:
    """Replace ``dest`` with a policy-only copy of checkpoint ``ck`` (:func:`write_policy_into`), filled
    beside it and renamed into place: a stop mid-write leaves the previous policy, never half of one."""
    with dir_written_whole(dest) as into:
        write_policy_into(ck, into, device)


def write_policy_into(ck: Path, into: Path, device: str) -> None:
    """Write a policy-only copy of checkpoint ``ck`` into the folder ``into``: the weights and normaliser
    with a fresh optimiser (no moment estimates) and no curriculum or reward state, small enough to
    commit or to carry to another machine; ``device`` is where the model is loaded to rewrite it."""
    from stable_baselines3 import PPO

    _copy_files(ck, into, _POLICY_FILES)
    model = PPO.load(into / "model.zip", device=device)
    model.policy.optimizer = type(model.policy.optimizer)(model.policy.parameters(),
                                                          **model.policy.optimizer_kwargs,
                                                          lr=model.policy.optimizer.param_groups[0]["lr"])
    model.save(into / "model.zip")


def select_kept_run(run_dir: Path, final_ck: Path, test_episodes: int = 200, test_seed: int = TEST_SEED,
                    device: str = "cpu") -> dict[str, Any]:
    """``selection.json`` of a finished kept run (the schema of :func:`rmtl.train.eval.selection.select_checkpoint`):
    the validation of every checkpoint from ``validation.csv``, the best one (``best/``) and the final
    checkpoint evaluated on the test seeds."""
    import json

    from rmtl.train.eval.evaluate import evaluate_checkpoint

    run_dir = Path(run_dir)
    rows = read_csv(run_dir / VALIDATION_CSV)
    if not rows:
        raise ValueError(f"{run_dir} has no {VALIDATION_CSV}")
    validation = [{"checkpoint": r["checkpoint"], "num_timesteps": int(r["timesteps"]), "episodes": int(r["episodes"]),
                   "successes": int(r["successes"]), "success_rate": float(r["success_rate"]),
                   "ci_low": float(r["ci_low"]), "ci_high": float(r["ci_high"]), "seed": int(r["seed"])} for r in rows]
    best = max(validation, key=lambda v: (v["success_rate"], v["num_timesteps"]))
    final = validation[-1]

    def test(ck: Path, name: str) -> dict[str, Any]:
        res = evaluate_checkpoint(ck, test_episodes, test_seed, device=device).to_dict()
        return {**res, "checkpoint": name}

    tests = {best["checkpoint"]: test(run_dir / BEST, best["checkpoint"])}
    if final["checkpoint"] not in tests:
        tests[final["checkpoint"]] = test(final_ck, final["checkpoint"])
    result = {
        "run": portable_path(run_dir),
        "params": {"validation_episodes": validation[0]["episodes"], "test_episodes": int(test_episodes),
                   "validation_seed": validation[0]["seed"], "test_seed": int(test_seed)},
        "seed_ranges": {"validation": [validation[0]["seed"], validation[0]["episodes"]],
                        "test": [int(test_seed), int(test_episodes)]},
        "validation": validation, "test": tests,
        "best": {"checkpoint": best["checkpoint"], "num_timesteps": best["num_timesteps"], "validation": best,
                 "test": tests[best["checkpoint"]]},
        "final": {"checkpoint": final["checkpoint"], "num_timesteps": final["num_timesteps"],
                  "test": tests[final["checkpoint"]]},
        "last_periodic": last_evaluations(read_csv(run_dir / "eval.csv")),
        "kept": True,
    }
    write_file_whole(run_dir / SELECTION_FILE, json.dumps(result, indent=1, default=str))  # the test's outcome, never half-written
    return result

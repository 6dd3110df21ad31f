"""Checkpoint directories, and the callback that asks the run's session for one every so often.

Everything a resumed run needs is in a checkpoint directory ``checkpoints/step_<N>/``:
``model.zip``, ``curriculum.json`` (curriculum state and the per-level statistics),
``vecnormalize.json`` when observations are normalised (JSON, never a pickle),
``reward_state.json`` (the reward shaper's running bounds) and ``meta.json`` (step count and
the run's config). Only :class:`rmtl.train.run.session.RunSession` writes them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from rmtl.train.run.run_dir import CHECKPOINTS, LATEST
from storage.whole_file import write_file_whole

REWARD_STATE = "reward_state.json"
"""The reward shaper's running statistics in a checkpoint."""


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    """Where the checkpoint of env step ``step`` is written."""
    return Path(run_dir) / CHECKPOINTS / f"step_{int(step):09d}"


def save_checkpoint(run_dir: Path, model: Any, curriculum_cb: Any, meta: dict[str, Any],
                    normalizer: Any = None, shaper: Any = None) -> Path:
    """Write ``checkpoints/step_<N>/`` and point ``checkpoints/latest.txt`` at it (written last).
    ``curriculum_cb``: anything with ``state_dict()`` (None: no curriculum state)."""
    step = int(model.num_timesteps)
    root = Path(run_dir) / CHECKPOINTS
    ck = checkpoint_dir(run_dir, step)
    ck.mkdir(parents=True, exist_ok=True)
    model.save(ck / "model.zip")
    if curriculum_cb is not None:
        (ck / "curriculum.json").write_text(json.dumps(curriculum_cb.state_dict(), indent=1))
    if normalizer is not None:
        from rmtl.train.run.artifacts import save_normalizer

        save_normalizer(normalizer, ck)  # JSON, never a pickle (rmtl.train.run.artifacts)
    if shaper is not None:
        (ck / REWARD_STATE).write_text(json.dumps(shaper.state_dict()))
    (ck / "meta.json").write_text(json.dumps({**meta, "num_timesteps": step,
                                               "saved": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=1, default=str))
    write_file_whole(root / LATEST, ck.name)
    return ck


class CheckpointCallback(BaseCallback):
    """Asks ``session`` (a :class:`~rmtl.train.run.session.RunSession`) to save a checkpoint every
    ``every`` env steps; made by :meth:`RunSession.checkpoint_callback`.

    It saves at the start of a rollout, i.e. *after* the PPO update (and any other
    per-rollout update) of the rollout that crossed the threshold, so checkpoint
    ``step_N`` holds everything learnt from the first N env steps.
    """

    def __init__(self, session: Any, every: int, verbose: int = 0):
        super().__init__(verbose)
        self.session = session
        self.every = int(every)
        self._next: int | None = None

    def _on_training_start(self) -> None:
        self._next = (self.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        steps = int(self.model.num_timesteps)
        if self._next is not None and steps >= self._next and self.session.last_saved != steps:
            ck = self.session.save(self.model)
            if self.verbose:
                print(f"checkpoint {ck}")
            self._next = (steps // self.every + 1) * self.every

"""One session of a training run, as Stage 1 and Stage 2 both run it around SB3's ``learn``.

A session starts fresh or resumes a checkpoint that :func:`rmtl.train.run.run_dir.open_run` found;
the stage builds its env, model and callbacks, and the session does the rest the two stages
share: restoring a checkpoint's normaliser, reward-shaper and curriculum state, reseeding and
recording a resumed session, the SB3 logger, the evaluation env (made on first use), wall time
across sessions, every checkpoint (the periodic ones through the callback it makes, and the
final one) and the end (final evaluation, closing every env)::

    ck, meta_prev = open_run(...)
    session = RunSession(run_dir, config, env, ck, meta_prev, logs=LOGS, verbose=verbose)
    with session:
        ...                                   # model, session.restore(...), session.begin(model)
        ckpt_cb = session.checkpoint_callback(curriculum_cb, meta, before_save=..., after_save=...)
        steps, final = session.learn(model, [..., ckpt_cb], eval_cb=eval_cb)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable, Sequence

from rmtl.train.run.checkpoints import CheckpointCallback, checkpoint_dir, save_checkpoint
from rmtl.train.run.run_dir import attach_logger, cut_logs_to, restore_normalizer, restore_reward_state


class RunSession:
    """What a Stage-1 or Stage-2 session does besides building its model and callbacks.

    ``config`` needs ``seed``, ``total_timesteps``, ``checkpoint_every`` and ``progress_bar``; ``env`` is the
    training env stack (:class:`rmtl.train.envs.train_env.TrainEnv`); ``checkpoint`` / ``meta_prev``
    are what ``open_run`` returned (None / {} for a fresh start).
    """

    def __init__(self, run_dir: Path, config: Any, env: Any, checkpoint: Path | None, meta_prev: dict[str, Any],
                 *, logs: Iterable[str], verbose: int = 0) -> None:
        self.run_dir, self.config, self.env, self.checkpoint = run_dir, config, env, checkpoint
        self.start = int(meta_prev["num_timesteps"]) if checkpoint is not None else 0
        """Env steps done before this session (0 for a fresh start)."""
        self._wall_before = float(meta_prev.get("wall_seconds", 0.0))
        self._t0 = time.perf_counter()
        self._logs = tuple(logs)
        self._verbose = verbose
        self._eval_env: Any = None
        self.last_saved: int | None = None
        """Env step of the checkpoint this session wrote last (None: none yet)."""
        self._curriculum_cb: Any = None
        self._meta: dict[str, Any] = {}
        self._before_save: Callable[[Path], None] | None = None
        self._after_save: Callable[[Path], None] | None = None

    @property
    def resumed(self) -> bool:
        return self.checkpoint is not None

    def restore(self, source: Path, curriculum_cb: Any = None) -> None:
        """Load checkpoint ``source``'s normaliser statistics and reward-shaper bounds into the env
        stack, and its curriculum state into ``curriculum_cb`` if given."""
        restore_normalizer(self.env.normalizer, source)
        restore_reward_state(self.env.reward_env.shaper, source)
        if curriculum_cb is not None and (Path(source) / "curriculum.json").is_file():
            curriculum_cb.load_state_dict(json.loads((Path(source) / "curriculum.json").read_text()))

    def begin(self, model: Any, **record: Any) -> None:
        """Start the session's bookkeeping: a resumed one reseeds the model's RNG streams with
        ``seed + start``, drops log rows written after its checkpoint and writes
        ``run_resume_<start>.json``; a fresh one writes ``run.json`` with ``record``. Then the logger."""
        from rmtl.provenance import write_run_record

        if self.resumed:
            model.set_random_seed(self.config.seed + self.start)
            cut_logs_to(self.run_dir, self._logs, self.start)
            write_run_record(self.run_dir, self.config, self.config.seed, name=f"run_resume_{self.start:09d}.json",
                             resumed_from=str(self.checkpoint), start_timesteps=self.start)
        else:
            write_run_record(self.run_dir, self.config, self.config.seed, **record)
        attach_logger(model, self.run_dir, self.start, self._verbose)

    def eval_env(self, make: Callable[[], Any]) -> Any:
        """The session's evaluation env, made by ``make`` on first use (a session that never
        evaluates never builds one) and closed with the session."""
        if self._eval_env is None:
            self._eval_env = make()
        return self._eval_env

    def wall_seconds(self) -> float:
        """Wall time of the run so far, earlier sessions included."""
        return self._wall_before + time.perf_counter() - self._t0

    def checkpoint_callback(self, curriculum_cb: Any, meta: dict[str, Any], *,
                            before_save: Callable[[Path], None] | None = None,
                            after_save: Callable[[Path], None] | None = None) -> CheckpointCallback:
        """Say what the session's checkpoints hold besides the model, the env stack's normaliser and
        its reward-shaper bounds: ``curriculum_cb``'s state and ``meta`` (which ``before_save``, called
        with the checkpoint directory about to be written, may update or add files to); ``after_save``
        gets each written checkpoint. Returns the callback that asks for one every
        ``config.checkpoint_every`` env steps."""
        self._curriculum_cb, self._meta = curriculum_cb, meta
        self._before_save, self._after_save = before_save, after_save
        return CheckpointCallback(self, self.config.checkpoint_every, verbose=self._verbose)

    def save(self, model: Any) -> Path | None:
        """Write the checkpoint of ``model``'s current step (None: already written this session)."""
        steps = int(model.num_timesteps)
        if self.last_saved == steps:
            return None
        if self._before_save is not None:
            self._before_save(checkpoint_dir(self.run_dir, steps))
        ck = save_checkpoint(self.run_dir, model, self._curriculum_cb, self._meta, self.env.normalizer,
                             self.env.reward_env.shaper)
        self.last_saved = steps
        if self._after_save is not None:
            self._after_save(ck)
        return ck

    def learn(self, model: Any, callbacks: Sequence[Any], *, eval_cb: Any) -> tuple[int, Any]:
        """Train up to ``config.total_timesteps``, then save the final checkpoint (unless a resumed
        session trained nothing) and evaluate with ``eval_cb`` (a PeriodicEvalCallback) unless it did at
        this step. Returns (env steps, final evaluation or None)."""
        remaining = self.config.total_timesteps - self.start
        if remaining > 0:
            model.learn(remaining, callback=list(callbacks), reset_num_timesteps=False,
                        progress_bar=self.config.progress_bar)
        steps = int(model.num_timesteps)
        if not self.resumed or steps != self.start:
            self.save(model)
        return steps, eval_cb.evaluate_final(model)

    def close(self) -> None:
        """Close the training vec env, its embedding source and the evaluation env."""
        self.env.venv.close()
        if self.env.source is not None and hasattr(self.env.source.inner, "close"):
            self.env.source.inner.close()
        if self._eval_env is not None:
            self._eval_env.close()

    def __enter__(self) -> RunSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

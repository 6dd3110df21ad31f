"""SB3 callbacks of both learners: curriculum, logging, periodic evaluation.

They hook into SB3's own PPO loop (no fork of it). The checkpoint callback is the run
session's (rmtl.train.run.checkpoints): only the session saves and restores.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from rmtl.env.curriculum import ReverseCurriculum
from rmtl.reward.vec_env import REWARD_INFO
from rmtl.train.run.csv_log import append_csv, read_csv
from rmtl.train.run.timing import Timings



def _dones_infos(locals_: dict[str, Any]) -> tuple[np.ndarray, Sequence[dict]]:
    return np.asarray(locals_["dones"], dtype=bool), locals_["infos"]


class CurriculumCallback(BaseCallback):
    """Drives the reverse curriculum from episode successes and keeps per-level statistics.

    On every finished episode (``dones``/``infos['is_success']``) it calls
    :meth:`ReverseCurriculum.record`; when the stage changes it sets the new
    ``[d_min, d_max]`` on all sub-envs through ``env_method('set_difficulty_range')``
    (also at the start of training, so a resumed run continues at its stage). Episodes
    already running when the stage changes finish at their old start difficulty.

    Per level it counts env steps, episodes and successes (paper Fig. 6) and appends a
    row per rollout to ``csv_path``: timesteps, stage, window success rate.
    """

    def __init__(self, curriculum: ReverseCurriculum, csv_path: str | Path | None = None, env: Any = None,
                 verbose: int = 0):
        super().__init__(verbose)
        self.curriculum = curriculum
        self.env = env
        """Vec env whose sub-envs get the difficulty range; None: the model's training env."""
        self.csv_path = Path(csv_path) if csv_path else None
        n = len(curriculum.stages)
        self.steps_per_stage = [0] * n
        self.episodes_per_stage = [0] * n
        self.successes_per_stage = [0] * n
        self.advances: list[dict[str, int]] = []
        """Every advance: timesteps, total episodes and the stage entered."""

    # --------------------------------------------------------------- env control
    def apply_stage(self) -> None:
        st = self.curriculum.stage
        env = self.env if self.env is not None else (self.training_env if hasattr(self, "model") else None)
        if env is not None:
            env.env_method("set_difficulty_range", st.d_min, st.d_max)

    def _on_training_start(self) -> None:
        self.apply_stage()

    def feed(self, dones: np.ndarray, infos: Sequence[dict], num_envs: int | None = None) -> bool:
        """Record the finished episodes of one vec-env step; True if the stage advanced."""
        k = self.curriculum.stage_index
        self.steps_per_stage[k] += int(num_envs if num_envs is not None else len(dones))
        advanced = False
        for i in np.flatnonzero(dones):
            success = bool(infos[i].get("is_success", False))
            k = self.curriculum.stage_index
            self.episodes_per_stage[k] += 1
            self.successes_per_stage[k] += int(success)
            if self.curriculum.record(success):
                advanced = True
                self.advances.append({"timesteps": int(self.num_timesteps), "episodes": self.curriculum.total_episodes,
                                      "stage": self.curriculum.stage_index})
                if self.verbose:
                    print(f"curriculum: stage {self.curriculum.stage_index} at {self.num_timesteps} env steps")
        if advanced:
            self.apply_stage()
        return advanced

    def _on_step(self) -> bool:
        dones, infos = _dones_infos(self.locals)
        self.feed(dones, infos)
        return True

    def _on_rollout_end(self) -> None:
        c = self.curriculum
        self.logger.record("curriculum/stage", c.stage_index)
        self.logger.record("curriculum/difficulty", c.stage.difficulty)
        self.logger.record("curriculum/window_success_rate", c.success_rate)
        self.logger.record("curriculum/episodes_in_stage", c.episodes_in_stage)
        if self.csv_path is not None:
            append_csv(self.csv_path, {
                "timesteps": int(self.num_timesteps), "stage": c.stage_index, "difficulty": c.stage.difficulty,
                "window_success_rate": round(c.success_rate, 4), "window_episodes": len(c._outcomes),
                "episodes_in_stage": c.episodes_in_stage, "total_episodes": c.total_episodes,
            })

    # --------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        return {
            "curriculum": self.curriculum.state_dict(),
            "stages": [dataclasses.asdict(s) for s in self.curriculum.stages],
            "window": self.curriculum.window,
            "steps_per_stage": list(self.steps_per_stage),
            "episodes_per_stage": list(self.episodes_per_stage),
            "successes_per_stage": list(self.successes_per_stage),
            "advances": list(self.advances),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.curriculum.load_state_dict(state["curriculum"])
        self.steps_per_stage = list(state["steps_per_stage"])
        self.episodes_per_stage = list(state["episodes_per_stage"])
        self.successes_per_stage = list(state["successes_per_stage"])
        self.advances = list(state.get("advances", []))


TIMED_PARTS = ("simulation", "rendering", "embedding", "cache_lookup", "evaluation", "checkpoints")
"""Parts of a rollout's wall time timed where they happen (rmtl.train.run.timing, the periodic
evaluation, a checkpoint's save and validation); ``policy_and_other`` is the rest."""


class TrainStatsCallback(BaseCallback):
    """TensorBoard/CSV scalars per rollout: success rate, reward components, phases, speed, cache, timings.

    - ``rollout/success_rate``: over the last 100 finished training episodes.
    - ``reward/<name>``: rollout mean of each scalar entry of ``info["reward"]`` (the reward's
      terms, whatever its kind: ``reward``, ``env``, ``u``, ``score``, ...).
    - ``phase/frac_<name>``: fraction of steps in each active phase.
    - ``time/env_steps_per_s`` (rollout collection only) and ``time/total_steps_per_s``
      (collection + PPO update, since the previous rollout), ``time/update_s``.
    - ``time/ms_per_step_<part>``: per env step, from :class:`Timings` (simulation,
      rendering, embedding, cache_lookup, evaluation, checkpoints, policy_and_other; the
      update's as ``time/update_s``).
    - ``cache/<stat>``: whatever ``stats_fn()`` returns (e.g. the cache source's hit rate).
    """

    def __init__(self, timings: Timings | None = None, stats_fn: Callable[[], dict[str, float]] | None = None,
                 verbose: int = 0, *, phase_names: Sequence[str]):
        super().__init__(verbose)
        self.phase_names = tuple(phase_names)
        self.timings = timings or Timings()
        self.stats_fn = stats_fn
        self.successes: deque[bool] = deque(maxlen=100)
        self._sums: dict[str, float] = {}
        self._n = 0
        self._phase_counts = np.zeros(len(self.phase_names), dtype=np.int64)
        self._t_rollout = 0.0
        self._t_end: float | None = None
        """End of the previous rollout (start of its PPO update)."""
        self._steps_at_end = 0
        self._update_logged = 0.0
        self._t0_snapshot: dict[str, float] = {}
        self._cache_prev = (0, 0)

    def _on_training_start(self) -> None:
        self._t_end = None
        self._steps_at_end = self.num_timesteps

    def _on_rollout_start(self) -> None:
        now = time.perf_counter()
        if self._t_end is not None:
            self.timings.add("ppo_update", now - self._t_end)
        self._t_rollout = now
        self._sums = {}
        self._n = 0
        self._phase_counts[:] = 0
        self._t0_snapshot = self.timings.snapshot()

    def _on_step(self) -> bool:
        dones, infos = _dones_infos(self.locals)
        for i in np.flatnonzero(dones):
            self.successes.append(bool(infos[i].get("is_success", False)))
        for info in infos:
            terms = info.get(REWARD_INFO, {})
            for k, v in terms.items():
                if isinstance(v, float):
                    self._sums[k] = self._sums.get(k, 0.0) + v
            if "phase" in terms:
                self._phase_counts[int(terms["phase"])] += 1
            elif "phase_rule" in info:
                self._phase_counts[int(info["phase_rule"])] += 1
        self._n += len(infos)
        return True

    def _on_rollout_end(self) -> None:
        now = time.perf_counter()
        log = self.logger.record
        if self.successes:
            log("rollout/success_rate", float(np.mean(self.successes)))
        for k, v in self._sums.items():
            log(f"reward/{k}", v / max(self._n, 1))
        if self._phase_counts.sum():
            for name, c in zip(self.phase_names, self._phase_counts / self._phase_counts.sum()):
                log(f"phase/frac_{name}", float(c))
        collect = now - self._t_rollout
        steps = max(self._n, 1)
        log("time/env_steps_per_s", self._n / collect if collect > 0 else 0.0)
        if self._t_end is not None and now > self._t_end:
            # Since the previous rollout ended: its PPO update plus this rollout.
            log("time/total_steps_per_s", (self.num_timesteps - self._steps_at_end) / (now - self._t_end))
        snap = self.timings.snapshot()
        parts = {k: snap.get(k, 0.0) - self._t0_snapshot.get(k, 0.0) for k in TIMED_PARTS}
        parts["policy_and_other"] = max(0.0, collect - sum(parts.values()))
        self.timings.add("policy_and_other", parts["policy_and_other"])
        for k, v in parts.items():
            log(f"time/ms_per_step_{k}", 1000.0 * v / steps)
        update_total = self.timings.seconds.get("ppo_update", 0.0)
        if update_total > self._update_logged:
            log("time/update_s", update_total - self._update_logged)
            self._update_logged = update_total
        if self.stats_fn is not None:
            st = self.stats_fn()
            for k, v in st.items():
                if isinstance(v, (int, float)):
                    log(f"cache/{k}", float(v))
            if "hits" in st and "states" in st:  # hit rate of this rollout alone
                dh, ds = st["hits"] - self._cache_prev[0], st["states"] - self._cache_prev[1]
                if ds > 0:
                    log("cache/rollout_hit_rate", dh / ds)
                self._cache_prev = (st["hits"], st["states"])
        self._t_end, self._steps_at_end = now, self.num_timesteps

    def _on_training_end(self) -> None:
        if self._t_end is not None:
            self.timings.add("ppo_update", time.perf_counter() - self._t_end)
            self._t_end = None


class PeriodicEvalCallback(BaseCallback):
    """Every ``every`` env steps: evaluate on the final stage, log ``eval/success_rate``, append to ``eval.csv``."""

    def __init__(self, evaluate: Callable[[Any], Any], every: int, csv_path: str | Path, verbose: int = 0):
        super().__init__(verbose)
        self.evaluate = evaluate
        self.every = int(every)
        self.csv_path = Path(csv_path)
        self.last_eval_step: int | None = None
        self._next = None

    def _on_training_start(self) -> None:
        if self.every > 0:
            self._next = (self.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        if self._next is not None and self.num_timesteps >= self._next:
            self.run_eval()
            self._next = (self.num_timesteps // self.every + 1) * self.every
        return True

    def evaluate_final(self, model: Any) -> Any:
        """Evaluate ``model`` at the end of training, unless this callback, or an earlier start of the
        run (the last row of its ``eval.csv``), already did at its step (None then)."""
        steps = int(model.num_timesteps)
        if self.last_eval_step is None:  # a start stopped after its final evaluation, resumed at its total
            rows = read_csv(self.csv_path)
            if rows and int(rows[-1].get("timesteps", -1)) == steps:
                self.last_eval_step = steps
        if self.last_eval_step == steps:
            return None
        # SB3 sets ``model`` only when training starts: a resumed run already at its total never does
        if getattr(self, "model", None) is None:
            self.init_callback(model)
        return self.run_eval()

    def run_eval(self) -> Any:
        t0 = time.perf_counter()
        self.num_timesteps = int(self.model.num_timesteps)
        res = self.evaluate(self.model)
        self.last_eval_step = int(self.num_timesteps)
        row = {"timesteps": int(self.num_timesteps), "episodes": res.episodes, "successes": res.successes,
               "success_rate": round(res.success_rate, 4), "ci_low": round(res.ci_low, 4),
               "ci_high": round(res.ci_high, 4), "mean_length": round(res.mean_length, 2),
               "eval_seconds": round(time.perf_counter() - t0, 2), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        append_csv(self.csv_path, row)
        try:
            logger = self.logger
        except AttributeError:  # a loaded model that has not trained this start has no logger yet
            logger = None
        if logger is not None:
            logger.record("eval/success_rate", res.success_rate)
            logger.record("eval/ci_low", res.ci_low)
            logger.record("eval/ci_high", res.ci_high)
        if self.verbose:
            print(f"eval at {self.num_timesteps}: {res}")
        return res

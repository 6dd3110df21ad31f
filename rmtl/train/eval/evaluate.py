"""Evaluation of a Stage-1 policy on the final, fully random curriculum stage.

Episodes are seeded (episode i resets with ``seed + i``, its start difficulty drawn from
the final stage's range [0.75, 1] by the env's seeded generator), actions are
deterministic, and the phase one-hot the policy expects is the distance rule of the
state: no rendering and no VLM are needed, for any variant.
"""

from __future__ import annotations

import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rmtl.env.check import SuccessRate
from rmtl.env.episode import run_episode
from rmtl.train.config import EnvConfig
from rmtl.errors import ConfigError
from rmtl.task import Task
from rmtl.train.config import FINAL_STAGE_RANGE
from rmtl.reward.phase import RulePhaseSelector
from rmtl.train.run.run_dir import checkpoint_meta, resolve_checkpoint  # noqa: F401  (callers import them from here too)
from rmtl.train.envs.phase_observation import PHASE_KEY, rule_phase_observation


@dataclass(frozen=True)
class EvalResult:
    """Success rate of seeded episodes with its 95% Wilson interval."""

    episodes: int
    successes: int
    success_rate: float
    ci_low: float
    ci_high: float
    mean_length: float
    seed: int
    difficulty_range: tuple[float, float]
    checkpoint: str | None = None
    num_timesteps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return (f"success {self.successes}/{self.episodes} = {self.success_rate:.3f} "
                f"(95% CI {self.ci_low:.3f}-{self.ci_high:.3f}), mean length {self.mean_length:.1f} steps, "
                f"start difficulty U{list(self.difficulty_range)}, seeds {self.seed}..{self.seed + self.episodes - 1}")


class ObsAdapter:
    """Turns a raw env observation into what a policy expects: phase one-hot, VecNormalize statistics."""

    def __init__(self, phase_input: bool, normalizer: Any, task: Task):
        self.phase_input = phase_input
        self.normalizer = normalizer
        self.task = task
        """Whose phase rule the one-hot follows."""

    @classmethod
    def for_model(cls, model: Any, normalizer: Any, task: Task) -> ObsAdapter:
        spaces = getattr(model.observation_space, "spaces", {})
        return cls(PHASE_KEY in spaces, normalizer, task)

    def __call__(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.phase_input:
            task = self.task
            out = rule_phase_observation(obs, RulePhaseSelector(task.phases), len(task.micro_tasks.names))
        else:
            out = dict(obs)
        if self.normalizer is not None:
            out = self.normalizer.normalize_obs(out)
        return out


def evaluate_policy_success(
    model: Any,
    env_config: EnvConfig | None = None,
    episodes: int = 50,
    seed: int = 1_000_000,
    *,
    difficulty_range: tuple[float, float] = FINAL_STAGE_RANGE,
    normalizer: Any = None,
    deterministic: bool = True,
    env: Any = None,
    task: Task,
) -> EvalResult:
    """Run ``episodes`` seeded episodes of ``model`` (anything with SB3's ``predict``) on ``task``'s env
    (``env_config``: its env config) with its phase rule."""
    own_env = env is None
    if env is None:
        env = task.make_env(env_config)
    adapt = ObsAdapter.for_model(model, normalizer, task)
    successes, lengths = 0, []
    try:
        env.set_difficulty_range(*difficulty_range)
        for ep in range(int(episodes)):
            end = run_episode(env, lambda obs: model.predict(adapt(obs), deterministic=deterministic)[0],
                              seed=int(seed) + ep)
            successes += int(end.success)
            lengths.append(end.info["step"])
    finally:
        if own_env:
            env.close()
    sr = SuccessRate("policy", float(difficulty_range[1]), int(episodes), successes,
                     float(np.mean(lengths)) if lengths else 0.0)
    lo, hi = sr.wilson_interval()
    return EvalResult(int(episodes), successes, sr.rate, float(lo), float(hi), sr.mean_length, int(seed),
                      (float(difficulty_range[0]), float(difficulty_range[1])))


def checkpoint_task(meta: dict[str, Any]) -> Task:
    """The registered task a checkpoint was trained on (its meta's config; older checkpoints: pick-and-lift)."""
    from rmtl.tasks import DEFAULT_TASK, get_task

    return get_task(meta.get("config", {}).get("task", DEFAULT_TASK))


def load_checkpoint(path: str | Path, device: str = "cpu") -> tuple[Any, dict[str, Any], Any]:
    """(PPO model, checkpoint meta, VecNormalize or None) of a checkpoint (see :func:`resolve_checkpoint`)."""
    from stable_baselines3 import PPO

    from rmtl.train.run.artifacts import load_normalizer

    ck = resolve_checkpoint(path)
    meta = checkpoint_meta(ck)
    normalizer = load_normalizer(ck)  # vecnormalize.json; a legacy pickle is refused, never loaded
    try:
        model = PPO.load(ck / "model.zip", device=device)
    except (zipfile.BadZipFile, KeyError, ValueError, EOFError, RuntimeError) as e:  # what SB3 and torch raise on a bad file
        raise ConfigError(f"{ck / 'model.zip'} is not a readable SB3 model ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:120]}); restore it from a copy, or pass another checkpoint") from None
    return model, meta, normalizer


def evaluate_checkpoint(path: str | Path, episodes: int = 100, seed: int = 1_000_000, *,
                        deterministic: bool = True, device: str = "cpu",
                        env_config: EnvConfig | None = None) -> EvalResult:
    """Success rate (95% Wilson CI) of a checkpoint over seeded episodes on the final stage.

    The task definition is the one the checkpoint was trained with (its ``meta.json``)
    unless ``env_config`` is given.
    """
    ck = resolve_checkpoint(path)
    model, meta, normalizer = load_checkpoint(ck, device)
    if env_config is None:
        env_config = EnvConfig.make(**(meta.get("config") or {}).get("env") or {})
    res = evaluate_policy_success(model, env_config, episodes, seed, normalizer=normalizer, deterministic=deterministic,
                                  task=checkpoint_task(meta))
    return EvalResult(**{**res.to_dict(), "checkpoint": str(ck), "num_timesteps": meta.get("num_timesteps")})

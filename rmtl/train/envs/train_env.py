"""The Stage-1 vec-env stack both stages train on and its reward source.

The stack, innermost first::

    the task's env (TerminalFrames for kinds that render)  x n_envs, Dummy/SubprocVecEnv
    SimTimer                 times simulation
    RewardVecEnv             the reward of the kind ``config.reward`` names (rmtl.reward.kinds)
    PhaseObservation         phase one-hot (unless phase_input is off)
    VecMonitor               episode returns/lengths
    VecNormalize             only with normalize_observations
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any
from collections.abc import Callable

from rmtl.env.curriculum import CurriculumStage, ReverseCurriculum
from rmtl.train.config import EnvConfig
from rmtl.task import Task
from rmtl.train.config import Stage1Config
from rmtl.train.run.timing import SimTimer, TimedSource, Timings
from rmtl.train.envs.phase_observation import PHASE_KEY, PhaseObservation

SourceFactory = Callable[[Stage1Config, Any], Any]
"""(config, loaded VLM) -> EmbeddingSource; replaces the default render-and-embed source."""


def task_of(config: Stage1Config, task: Task | None = None) -> Task:
    """The task a run trains, looked up once at the entry point: ``task`` if injected (a task
    that is not registered, e.g. in tests), else the registered task ``config.task`` names."""
    if task is not None:
        return task
    from rmtl.tasks import get_task

    return get_task(config.task)


def _make_env(env_config: EnvConfig, terminal_frames: bool, task: Task):
    env = task.make_env(env_config)
    if terminal_frames:
        from rmtl.reward.terminal_frames import TerminalFrames

        env = TerminalFrames(env)
    return env


def cache_source(config: Stage1Config, vlm: Any, task: Task, reward: Any = None) -> Any:
    """The cached reward path: FAISS state-cache lookups, render and embed only the misses
    (``rmtl.reward.cached_source.CachedEmbeddingSource`` over ``config.cache.store``), keyed and
    phase-labelled as ``task`` says; ``reward``: the run's resolved reward config (:func:`run_reward`)."""
    from rmtl.reward.cached_source import CachedEmbeddingSource

    c = config.cache
    reward = reward if reward is not None else task_reward_config(config, task)
    if c.atlas:
        from rmtl.reward.scorer import PhasedScorer

        scorer = PhasedScorer.from_config(reward, vlm.encode_text)
        overlay = c.overlay or str(config.run_dir() / "overlay.zarr")
        return CachedEmbeddingSource.open_catalogue(
            c.atlas, vlm, overlay, radius=c.radius, views=reward.active_views,
            renderer_id=config.env.render_profile()["renderer_id"], batch_size=config.reward.batch_size,
            audit_every=c.audit_every, audit_scorer=lambda e: scorer(e).aggregate, key_spec=task.key_spec,
            phase_labels=task.phases)
    return CachedEmbeddingSource.open(c.store, vlm, radius=c.radius, views=reward.active_views,
                                      append=c.grow, batch_size=config.reward.batch_size, save_every=c.persist_every,
                                      key_spec=task.key_spec, phase_labels=task.phases)


def task_reward_config(config: Stage1Config, task: Task | None = None) -> Any:
    """The VLM reward config of a run: ``config.reward`` resolved against its task (prompts: the
    configured texts, what they leave unset the task's own; views: names of its camera bank)."""
    from rmtl.errors import ConfigError
    from rmtl.reward.kinds.vlm import RewardConfig

    if not isinstance(config.reward, RewardConfig):
        raise ConfigError(f"reward kind {config.reward.kind!r} has no VLM reward config (no prompts, no model)")
    task = task_of(config, task)
    return task.reward_config(config.reward)


def run_reward(config: Stage1Config, task: Task | None = None) -> Any:
    """The reward config a run's kind is built with: a VLM reward's resolved against its task
    (:func:`task_reward_config`), any other kind's as configured."""
    from rmtl.reward.kinds.vlm import RewardConfig

    return task_reward_config(config, task) if isinstance(config.reward, RewardConfig) else config.reward


def build_reward_kind(config: Stage1Config, task: Task | None, *, reward: Any = None, vlm: Any = None,
                      source: Any = None) -> Any:
    """The run's reward kind (the one ``config.reward`` names, rmtl.reward.kinds), built from its
    reward config (``reward``, else :func:`run_reward`), its task and the run's facts it reads."""
    from rmtl.reward.kinds import RunFacts, get_kind

    task = task_of(config, task)
    reward = reward if reward is not None else run_reward(config, task)
    return get_kind(config.reward.kind).build(reward, task, RunFacts(seed=int(config.seed)), vlm=vlm, source=source)


@dataclasses.dataclass(frozen=True)
class EnvHooks:
    """Wrappers a caller inserts into the stack (the Stage-2 manager's): ``below_reward`` right
    under the reward wrapper (sees each step before it is scored), ``above_phase`` right above
    the phase one-hot. Each is ``venv -> wrapped venv``."""

    below_reward: Callable[[Any], Any] | None = None
    above_phase: Callable[[Any], Any] | None = None


@dataclasses.dataclass
class TrainEnv:
    """The training vec env and the parts of it the trainer talks to."""

    venv: Any
    reward_env: Any
    source: TimedSource | None
    normalizer: Any
    timings: Timings


def build_train_env(config: Stage1Config, *, vlm: Any = None, source: Any = None,
                    source_factory: SourceFactory | None = None, timings: Timings | None = None,
                    task: Task | None = None, phase_selector: Any = None,
                    hooks: EnvHooks | None = None) -> TrainEnv:
    """The Stage-1 vec-env stack of the module docstring (seeding is left to PPO).

    ``task``: another task's env, reference reward, phase rule and micro-task prompts instead
    of pick-and-lift's (its envs are made in this process unless ``task.make_env`` pickles):
    its VLM reward scores the goals of its micro-tasks (:func:`task_reward_config`) and picks
    the active one with its rule.

    ``phase_selector`` replaces the rule for the reward and the phase one-hot (a Stage-2
    manager's); ``hooks`` inserts wrappers below the reward and above the phase one-hot.
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor, VecNormalize

    from rmtl.reward.phase import RulePhaseSelector

    from rmtl.reward import RewardShaper, RewardVecEnv
    from rmtl.reward.kinds import get_kind

    task = task_of(config, task)
    reward = run_reward(config, task)  # resolved once: the cache source and the kind share it
    rule = RulePhaseSelector(task.phases)
    timings = timings or Timings()
    needs_frames = get_kind(config.reward.kind).needs_frames
    make = functools.partial(_make_env, config.env, needs_frames, task)
    if config.vec_env == "workers":
        from rmtl.train.envs.process_group import ProcessGroupVecEnv

        raw = ProcessGroupVecEnv([make] * config.n_envs, config.workers, config.worker_threads)
    else:
        raw = (SubprocVecEnv if config.vec_env == "subproc" else DummyVecEnv)([make for _ in range(config.n_envs)])
    venv: Any = SimTimer(raw, timings)
    if hooks is not None and hooks.below_reward is not None:
        venv = hooks.below_reward(venv)
    timed = None
    if needs_frames:
        from rmtl.reward import VLMEmbeddingSource

        if vlm is None:
            from rmtl.vlm.loader import load_vlm

            vlm = load_vlm(config.reward.model, config.reward.device, config.reward.precision,
                           compile=config.reward.compile)
        elif config.reward.compile and not getattr(vlm, "compiled", True):
            vlm.compile_image_tower()  # an injected model runs as the config (and config.yaml) says
        if source is None:
            if source_factory is not None:
                source = source_factory(config, vlm)
            elif config.cache.store or config.cache.atlas:
                source = cache_source(config, vlm, task, reward)
            else:
                source = VLMEmbeddingSource(vlm, config.reward.batch_size)
        timed = TimedSource(source, timings)
    kind = build_reward_kind(config, task, reward=reward, vlm=vlm, source=timed)
    shaper = RewardShaper(config.n_envs, config.reward.shaping_config(), num_phases=kind.num_phases)
    venv = reward_env = RewardVecEnv(venv, kind, phase_selector or rule, shaper)
    if config.phase_input:
        venv = PhaseObservation(venv, phase_selector or rule, len(task.micro_tasks.names))
    if hooks is not None and hooks.above_phase is not None:
        venv = hooks.above_phase(venv)
    venv = VecMonitor(venv)
    normalizer = None
    if config.normalize_observations:
        keys = [k for k in venv.observation_space.spaces if k != PHASE_KEY]
        venv = normalizer = VecNormalize(venv, norm_obs=True, norm_reward=False, norm_obs_keys=keys)
    return TrainEnv(venv, reward_env, timed, normalizer, timings)


def make_curriculum(config: Stage1Config, stages: tuple[CurriculumStage, ...]) -> ReverseCurriculum:
    """The task's curriculum stages; without curriculum, the same object pinned at the final stage."""
    start = 0 if config.curriculum else len(stages) - 1
    return ReverseCurriculum(stages, window=config.curriculum_window, start_stage=start)

"""The vec-env stack both stages train on: one step, innermost first, as one ordered list.

    the task's env           one per sub-env; in TerminalFrames when the reward renders
    Dummy/SubprocVecEnv      or ProcessGroupVecEnv (``vec_env``)
    SimTimer                 times simulation
    below_reward             a caller's hook (the Stage-2 manager's decisions), else nothing
    RewardVecEnv             the reward kind, the phase selector and the shaper
    PhaseObservation         the active micro-task's one-hot (``phase_input``)
    above_phase              a caller's hook (the Stage-2 manager's segments), else nothing
    VecMonitor               episode returns and lengths
    VecNormalize             observations (``normalize_observations``)

:func:`stack_layers` returns the wrappers above the sub-envs as that list and :func:`compose`
applies it, in the spirit of torchrl's ``Compose``; :data:`STACK_ORDER` names it, and
``docs/reward.md`` ("One step, file by file") follows one step through it. Every builder
takes what it reads (:class:`~rmtl.train.config.EnvStackConfig`, the task, the reward
config), never the whole run config.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple
from collections.abc import Callable, Sequence

from rmtl.env.curriculum import CurriculumStage, ReverseCurriculum
from rmtl.reward.config import RewardKindConfig
from rmtl.task import Task
from rmtl.train.config import CacheConfig, EnvStackConfig
from rmtl.train.envs.phase_observation import PHASE_KEY, PhaseObservation
from rmtl.train.run.timing import SimTimer, TimedSource, Timings

STACK_ORDER = ("SimTimer", "below_reward", "RewardVecEnv", "PhaseObservation", "above_phase", "VecMonitor",
               "VecNormalize")
"""The wrappers above the sub-envs, innermost first; a run leaves out those it does not use."""


class Layer(NamedTuple):
    """One wrapper of the stack: its name in :data:`STACK_ORDER` and ``venv -> wrapped venv``."""

    name: str
    wrap: Callable[[Any], Any]


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


def task_of(name: str, task: Task | None = None) -> Task:
    """The task a run trains, looked up once at the entry point: ``task`` if injected (a task
    that is not registered, e.g. in tests), else the registered task called ``name``."""
    if task is not None:
        return task
    from rmtl.tasks import get_task

    return get_task(name)


def resolve_reward(reward: RewardKindConfig, task: Task) -> Any:
    """The reward config a run's kind is built with: a VLM reward's resolved against its task
    (prompts: the configured texts, what they leave unset the task's own; views: names of its
    camera bank), any other kind's as configured."""
    from rmtl.reward.kinds.vlm import RewardConfig

    return task.reward_config(reward) if isinstance(reward, RewardConfig) else reward


def make_sub_envs(task: Task, stack: EnvStackConfig, *, terminal_frames: bool) -> Any:
    """``stack.n_envs`` envs of ``task`` (``stack.env``), each in TerminalFrames when the reward renders (so an
    episode's last state is rendered before SB3's auto-reset), vectorised as ``stack.vec_env`` says."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    make = functools.partial(_make_env, stack.env, terminal_frames, task)
    if stack.vec_env == "workers":
        from rmtl.train.envs.process_group import ProcessGroupVecEnv

        return ProcessGroupVecEnv([make] * stack.n_envs, stack.workers, stack.worker_threads)
    return (SubprocVecEnv if stack.vec_env == "subproc" else DummyVecEnv)([make for _ in range(stack.n_envs)])


def _make_env(env_config: Any, terminal_frames: bool, task: Task):
    env = task.make_env(env_config)
    if terminal_frames:
        from rmtl.reward.terminal_frames import TerminalFrames

        env = TerminalFrames(env)
    return env


def reward_vlm(reward: Any, vlm: Any = None) -> Any:
    """The reward model of a VLM reward config: ``vlm`` if given (compiled when the config says
    so, as config.yaml records), else loaded from ``reward.model``."""
    if vlm is None:
        from rmtl.vlm.loader import load_vlm

        return load_vlm(reward.model, reward.device, reward.precision, compile=reward.compile)
    if reward.compile and not getattr(vlm, "compiled", True):
        vlm.compile_image_tower()
    return vlm


def embedding_source(vlm: Any, reward: Any, cache: CacheConfig, task: Task, *, renderer_id: str,
                     overlay: str | None = None) -> Any:
    """States -> per-view embeddings of a resolved VLM reward: render and embed every state, or,
    with ``cache.store`` / ``cache.atlas``, FAISS state-cache lookups that render and embed only
    the misses (rmtl.reward.cached_source), keyed and phase-labelled as ``task`` says."""
    if not (cache.store or cache.atlas):
        from rmtl.reward import VLMEmbeddingSource

        return VLMEmbeddingSource(vlm, reward.batch_size)
    from rmtl.reward.cached_source import CachedEmbeddingSource

    if cache.atlas:
        from rmtl.reward.scorer import PhasedScorer

        scorer = PhasedScorer.from_config(reward, vlm.encode_text)
        return CachedEmbeddingSource.open_catalogue(
            cache.atlas, vlm, overlay, radius=cache.radius, views=reward.active_views, renderer_id=renderer_id,
            batch_size=reward.batch_size, audit_every=cache.audit_every, audit_scorer=lambda e: scorer(e).aggregate,
            key_spec=task.key_spec, phase_labels=task.phases)
    return CachedEmbeddingSource.open(cache.store, vlm, radius=cache.radius, views=reward.active_views,
                                      append=cache.grow, batch_size=reward.batch_size, save_every=cache.persist_every,
                                      key_spec=task.key_spec, phase_labels=task.phases)


def build_reward_kind(reward: Any, task: Task, seed: int, *, vlm: Any = None, source: Any = None) -> Any:
    """The reward kind ``reward.kind`` names (rmtl.reward.kinds), built from its resolved config
    (:func:`resolve_reward`), its task and the run seed."""
    from rmtl.reward.kinds import RunFacts, get_kind

    return get_kind(reward.kind).build(reward, task, RunFacts(seed=int(seed)), vlm=vlm, source=source)


def stack_layers(*, timings: Timings, reward: Callable[[Any], Any], phase: Callable[[Any], Any] | None,
                 normalize: Callable[[Any], Any] | None, hooks: EnvHooks = EnvHooks()) -> list[Layer]:
    """The wrappers above the sub-envs, innermost first, in :data:`STACK_ORDER` (those left as
    None are not used): ``reward`` makes the RewardVecEnv, ``phase`` the phase one-hot,
    ``normalize`` the observation normaliser."""
    from stable_baselines3.common.vec_env import VecMonitor

    layers = [Layer("SimTimer", functools.partial(SimTimer, timings=timings)),
              Layer("below_reward", hooks.below_reward), Layer("RewardVecEnv", reward),
              Layer("PhaseObservation", phase), Layer("above_phase", hooks.above_phase),
              Layer("VecMonitor", VecMonitor), Layer("VecNormalize", normalize)]
    return [layer for layer in layers if layer.wrap is not None]


def compose(venv: Any, layers: Sequence[Layer]) -> tuple[Any, dict[str, Any]]:
    """``venv`` wrapped in ``layers``, innermost first; also each layer's wrapper by name."""
    built = {}
    for layer in layers:
        venv = built[layer.name] = layer.wrap(venv)
    return venv, built


def build_train_env(stack: EnvStackConfig, task: Task, *, kind: Any = None, vlm: Any = None, source: Any = None,
                    timings: Timings | None = None, phase_selector: Any = None,
                    hooks: EnvHooks = EnvHooks()) -> TrainEnv:
    """The stack of the module docstring for ``task`` (seeding is left to PPO).

    ``kind``: a reward kind already built (tests inject a scorer this way), else the one
    ``stack.reward`` names; ``vlm`` / ``source``: the reward model and embedding source of a
    kind that renders, else loaded from the reward config (:func:`reward_vlm`,
    :func:`embedding_source`). ``phase_selector`` replaces the task's rule for the reward and
    the phase one-hot (a Stage-2 manager's); ``hooks`` inserts wrappers below the reward and
    above the phase one-hot.
    """
    from stable_baselines3.common.vec_env import VecNormalize

    from rmtl.reward import RewardShaper, RewardVecEnv
    from rmtl.reward.kinds import get_kind
    from rmtl.reward.phase import RulePhaseSelector

    timings = timings or Timings()
    reward = resolve_reward(stack.reward, task)
    needs_frames = kind.needs_frames if kind is not None else get_kind(reward.kind).needs_frames
    timed = None
    if kind is None:
        if needs_frames:
            vlm = reward_vlm(reward, vlm)
            source = source if source is not None else embedding_source(
                vlm, reward, stack.cache, task, renderer_id=stack.env.render_profile()["renderer_id"],
                overlay=stack.overlay)
            timed = TimedSource(source, timings)
        kind = build_reward_kind(reward, task, stack.seed, vlm=vlm, source=timed)
    selector = phase_selector or RulePhaseSelector(task.phases)
    shaper = RewardShaper(stack.n_envs, reward.shaping_config(), num_phases=kind.num_phases)
    num_micro_tasks = len(task.micro_tasks.names)

    def normalize(venv: Any) -> Any:
        keys = [k for k in venv.observation_space.spaces if k != PHASE_KEY]  # the one-hot stays as it is
        return VecNormalize(venv, norm_obs=True, norm_reward=False, norm_obs_keys=keys)

    layers = stack_layers(
        timings=timings, hooks=hooks,
        reward=lambda venv: RewardVecEnv(venv, kind, selector, shaper),
        phase=(lambda venv: PhaseObservation(venv, selector, num_micro_tasks)) if stack.phase_input else None,
        normalize=normalize if stack.normalize_observations else None)
    venv, built = compose(make_sub_envs(task, stack, terminal_frames=needs_frames), layers)
    return TrainEnv(venv, built["RewardVecEnv"], timed, built.get("VecNormalize"), timings)


def make_curriculum(stages: tuple[CurriculumStage, ...], *, curriculum: bool, window: int) -> ReverseCurriculum:
    """The task's curriculum stages; without curriculum, the same object pinned at the final stage."""
    return ReverseCurriculum(stages, window=window, start_stage=0 if curriculum else len(stages) - 1)

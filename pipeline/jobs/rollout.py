"""Roll out episodes and render the camera bank: the first step of the data flow.

A worker runs whole episodes and returns row arrays (frames, state, key, labels); the
caller (one writer per store) appends them. Episodes are identified by an integer id;
everything about episode ``i`` (reset seed, difficulty, policy noise, a checkpoint
policy's action sampling) is derived from ``(seed, i)``, so any subset of episodes can be
re-run, on any worker, with the same result.

Policies: the scripted expert with Gaussian action noise (two levels alternating, or any
list of ``noise_levels``), uniform random actions, one of the task's scripted degenerate
behaviours (``behaviour:<name>``, with the expert's noise), or a Stage-1 PPO checkpoint (the
states a learner visits, for off-expert reward checks).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

import rmtl  # noqa: F401  (MUJOCO_GL before mujoco)
from rmtl.config import MAX_EPISODES, Config
from rmtl.env.cameras import Resolution, ViewNames
from rmtl.env.render_settings import RenderSettings
from rmtl.env.episode import run_episode
from rmtl.tasks import DEFAULT_TASK, Task, get_task, task_views

POLICIES = ("expert", "random", "coverage")
BEHAVIOUR = "behaviour:"
"""Prefix of a policy spec naming one of the task's scripted behaviours (``behaviour:push``)."""


def behaviour_name(policy: str) -> str | None:
    """The behaviour a policy spec names (``behaviour:push`` -> ``push``), else None."""
    return policy[len(BEHAVIOUR):] if policy.startswith(BEHAVIOUR) else None


class EpisodeSpec(Config):
    """Which episodes to roll out and how to render them: the fields a rollout and the
    render-and-embed job share (:class:`RolloutConfig`, ``RenderAndEmbedConfig``), stated once."""

    task: str = DEFAULT_TASK
    """The task (rmtl.tasks.get_task) whose env, expert, curriculum and key the rollout uses."""
    episodes: int = Field(8, ge=1, le=MAX_EPISODES)
    """Number of episodes."""
    policy: str = "expert"
    """'expert' (scripted, with noise), 'random', 'behaviour:<name>' (a scripted degenerate
    behaviour of the task, with the same noise), 'coverage' (each episode one scene set directly,
    not by a policy: the task's coverage scenes, one row each), or a path to an SB3 PPO checkpoint (.zip)."""
    noise_std: float = Field(0.15, ge=0)
    """Gaussian action noise of the expert or behaviour; episodes alternate noise_std and 2x noise_std."""
    noise_levels: tuple[float, ...] | None = None
    """Expert noise levels to cycle through instead of noise_std/2x noise_std: episode i gets
    noise_levels[(i // len(stages)) % len(noise_levels)], so every stage meets every level."""
    deterministic: bool = False
    """Checkpoint policies: the deterministic mean action (False: sampled, as in training)."""
    stages: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Curriculum stages the episodes cycle through; u ~ U[d_min, d_max] of the stage."""
    views: ViewNames = ("all",)
    """Camera views rendered for every step."""
    seed: int = Field(0, ge=0)
    """Base seed: episode i resets with seed + i."""
    render: RenderSettings = RenderSettings()
    """Renderer settings (culling, mesh simplification, anti-aliasing); a store keeps one renderer."""

    @field_validator("views", mode="after")
    @classmethod
    def _bank_views(cls, v: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        return task_views(v, info.data.get("task", DEFAULT_TASK))  # the task's camera bank, in bank order

    @field_validator("task")
    @classmethod
    def _task(cls, v):
        get_task(v)  # one line naming the known tasks
        return v

    @model_validator(mode="after")
    def _stages(self):
        n = len(get_task(self.task).curriculum_stages)
        if not self.stages or any(not 0 <= s < n for s in self.stages):
            raise ValueError(f"stages must be curriculum stage indices in 0..{n - 1}")
        return self

    def the_task(self) -> Task:
        return get_task(self.task)

    @field_validator("noise_levels")
    @classmethod
    def _levels(cls, v):
        if v is not None and (not v or any(x < 0 for x in v)):
            raise ValueError("noise_levels must be a non-empty list of standard deviations >= 0")
        return None if v is None else tuple(float(x) for x in v)

    @field_validator("policy")
    @classmethod
    def _policy(cls, v, info: ValidationInfo):
        name = behaviour_name(v)
        if name is not None:
            if "task" not in info.data:
                return v  # the task itself was refused; that error is the one shown
            task = get_task(info.data["task"])
            if name not in task.behaviours:
                known = ", ".join(sorted(task.behaviours)) or "none"
                raise ValueError(f"unknown behaviour {name!r} of task {task.name}; known behaviours: {known}")
            return v
        if v == "coverage" and "task" in info.data and get_task(info.data["task"]).coverage_scene is None:
            raise ValueError(f"task {info.data['task']} defines no coverage scenes; use another policy")
        if v not in POLICIES and not v.endswith(".zip"):
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, {BEHAVIOUR}<name> or a path to an "
                             f"SB3 checkpoint (.zip)")
        if v.endswith(".zip") and not Path(v).is_file():
            raise ValueError(f"policy checkpoint {v} does not exist")
        return v


@dataclass(frozen=True)
class EpisodePlan:
    episode: int
    reset_seed: int
    difficulty: float
    noise_std: float



class RolloutConfig(EpisodeSpec):
    """What to roll out and how to render it."""

    resolution: Resolution = 96
    """Square frame size in pixels."""
    render_reset: bool = True
    """Also store the reset state (step 0) of each episode."""

def plan_episode(config: RolloutConfig, episode: int) -> EpisodePlan:
    """Deterministic reset seed, difficulty and noise of episode ``episode``."""
    rng = np.random.default_rng([config.seed, episode])
    stage = config.the_task().curriculum_stages[config.stages[episode % len(config.stages)]]
    cycle = episode // len(config.stages)
    if config.noise_levels is not None:
        noise = config.noise_levels[cycle % len(config.noise_levels)]
    else:
        noise = config.noise_std * (1 + cycle % 2)
    return EpisodePlan(episode, config.seed + episode, float(rng.uniform(stage.d_min, stage.d_max)), noise)


def policy_label(config: RolloutConfig, plan: EpisodePlan) -> str:
    """What produced an episode: 'expert noise 0.3', 'behaviour push noise 0', 'random' or the
    checkpoint's step directory."""
    if config.policy == "expert":
        return f"expert noise {plan.noise_std:g}"
    if (name := behaviour_name(config.policy)) is not None:
        return f"behaviour {name} noise {plan.noise_std:g}"
    if config.policy == "random":
        return "random"
    if config.policy == "coverage":
        return f"coverage {config.the_task().coverage_category(plan.episode)}"
    return f"checkpoint {Path(config.policy).parent.name}"


@functools.lru_cache(maxsize=2)
def _checkpoint(path: str):
    """(PPO model, observation adapter) of a Stage-1 checkpoint, loaded once per process."""
    from rmtl.train.eval.evaluate import ObsAdapter, checkpoint_task, load_checkpoint

    model, meta, normalizer = load_checkpoint(path)
    return model, ObsAdapter.for_model(model, normalizer, checkpoint_task(meta))


def make_policy(config: RolloutConfig, plan: EpisodePlan, env) -> Callable:
    task = config.the_task()
    if config.policy == "expert":
        return task.expert(plan.noise_std, plan.reset_seed)
    if (name := behaviour_name(config.policy)) is not None:
        return task.behaviours[name](plan.noise_std, plan.reset_seed)  # a fresh one: behaviours keep episode state
    if config.policy == "random":
        rng = np.random.default_rng([config.seed, plan.episode, 1])
        return lambda obs: rng.uniform(-1, 1, size=task.action_dim).astype(np.float32)
    import torch

    model, adapt = _checkpoint(config.policy)
    # SB3 samples actions from torch's global generator: seed it per episode so an
    # episode's rollout does not depend on which episodes ran before it in this process.
    torch.manual_seed(int(np.random.default_rng([config.seed, plan.episode, 2]).integers(2**31)))
    return lambda obs: model.predict(adapt(obs), deterministic=config.deterministic)[0]


def rollout_episodes(config: RolloutConfig, episodes: list[int], render: bool = True,
                     env=None) -> dict[str, np.ndarray]:
    """Run the given episodes; returns row arrays ready for DatasetStore.append.

    Each row holds the action of the env step that ended in it and that step's
    terminated / truncated flags (the reset row: NaN action, both False).

    render=False skips the camera bank (no ``frames``): state-only datasets such as BC
    labels. ``env`` reuses an existing env of the task (else one is made and closed).
    """
    task = config.the_task()
    own = env is None
    if own:
        env = task.make_env(views=config.views, resolution=config.resolution, render=config.render)
    fields = ("frames",) * render + ("state", "episode", "step", "phase_rule", "success", "difficulty", "action",
                                     "terminated", "truncated")
    cols: dict[str, list] = {k: [] for k in fields}
    act_dim = task.action_dim
    no_action = np.full(act_dim, np.nan, dtype=np.float32)

    def record(info, success: bool, action: np.ndarray = no_action, terminated: bool = False,
               truncated: bool = False) -> None:
        if render:
            cols["frames"].append(env.render_views(config.views, config.resolution))
        cols["state"].append(env.state)
        cols["episode"].append(plan.episode)
        cols["step"].append(info["step"])
        cols["phase_rule"].append(info["phase_rule"])
        cols["success"].append(success)
        cols["difficulty"].append(plan.difficulty)
        cols["action"].append(action)
        cols["terminated"].append(terminated)
        cols["truncated"].append(truncated)

    def step(action: Any, obs: Any, terminated: bool, truncated: bool, info: Any) -> None:
        # stored as the env applies it (clipped to [-1, 1]), on the row the step ended in
        applied = np.clip(np.asarray(action, dtype=np.float64).reshape(act_dim), -1.0, 1.0).astype(np.float32)
        record(info, bool(info["is_success"]), applied, terminated, truncated)

    try:
        for ep in episodes:
            plan = plan_episode(config, ep)
            if config.policy == "coverage":  # one scene set directly: its reset is not a row of it
                env.reset(seed=plan.reset_seed, options={"difficulty": plan.difficulty})
                _, info = task.coverage_scene(env, np.random.default_rng([config.seed, ep, 3]), ep)
                record(info, False)
                continue
            policy = make_policy(config, plan, env)
            run_episode(env, policy, seed=plan.reset_seed, options={"difficulty": plan.difficulty}, on_step=step,
                        on_reset=(lambda obs, info: record(info, False)) if config.render_reset else None)
    finally:
        if own:
            env.close()
    out = {
        "state": np.asarray(cols["state"], dtype=np.float32).reshape(-1, task.key_spec.state_dim),
        "episode": np.asarray(cols["episode"], dtype=np.int64),
        "step": np.asarray(cols["step"], dtype=np.int32),
        "phase_rule": np.asarray(cols["phase_rule"], dtype=np.int8),
        "success": np.asarray(cols["success"], dtype=bool),
        "difficulty": np.asarray(cols["difficulty"], dtype=np.float32),
        "action": np.asarray(cols["action"], dtype=np.float32).reshape(-1, act_dim),
        "terminated": np.asarray(cols["terminated"], dtype=bool),
        "truncated": np.asarray(cols["truncated"], dtype=bool),
    }
    if render:
        out["frames"] = np.stack(cols["frames"]).astype(np.uint8)
    out["key"] = task.key_spec.keys(out["state"])
    return out


def episode_chunks(episodes: list[int], chunk: int) -> list[list[int]]:
    """Split episode ids into work items of ``chunk`` episodes."""
    return [episodes[i : i + chunk] for i in range(0, len(episodes), max(1, chunk))]


def map_rollouts(config: RolloutConfig, episodes: list[int], workers: int = 1, chunk: int = 2,
                 client=None, render: bool = True, watch=None):
    """Yield row batches (one per chunk of episodes, in completion order) rendered in parallel.

    With a Dask ``client`` the chunks run on its workers (a LocalCluster or a cluster
    address); otherwise on ``workers`` local processes (1: in this process). Each chunk is
    one task, so per-task overhead is paid per few episodes, not per frame.

    ``watch`` (with a client): a :class:`pipeline.jobs.dask_cluster.WorkerWait`, asked every
    second while no chunk arrives (it says when the scheduler has no worker left and gives up
    with one line after its timeout) and told when one arrives.
    """
    chunks = episode_chunks(episodes, chunk)
    if client is not None:
        yield from _dask_rollouts(client, [(config, c, render) for c in chunks], watch)
    elif workers <= 1:
        for c in chunks:
            yield rollout_episodes(config, c, render)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed as cf_completed

        # spawn: a forked child would inherit (and break) the parent's GL context.
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            for fut in cf_completed([pool.submit(rollout_episodes, config, c, render) for c in chunks]):
                yield fut.result()


def _dask_rollouts(client, jobs: list[tuple], watch=None):
    """Results of ``rollout_episodes(*job)`` for each job on the Dask ``client``, in completion
    order; ``watch``: see :func:`map_rollouts`. A task that killed the workers it ran on (Dask's
    ``KilledWorker``) or a scheduler gone (its futures cancelled) is one ConfigError line."""
    import time

    from distributed import as_completed

    from pipeline.jobs.dask_cluster import POLL_S, task_lost

    futures = [client.submit(rollout_episodes, *job, pure=False) for job in jobs]
    pending = as_completed(futures)
    asked = time.monotonic()
    while not pending.is_empty():
        batch = pending.next_batch(block=False)
        if not batch:
            time.sleep(0.1)
            if watch is not None and time.monotonic() - asked >= POLL_S:
                watch.poll()
                asked = time.monotonic()
            continue
        for fut in batch:
            try:
                rows = fut.result()
            except Exception as e:  # noqa: BLE001 - the task's own error (a bug) is re-raised as it is
                lost = task_lost(e, watch, jobs[futures.index(fut)][1])
                if lost is None:
                    raise
                raise lost from None
            fut.release()
            if watch is not None:
                watch.alive()
            yield rows
        asked = time.monotonic()

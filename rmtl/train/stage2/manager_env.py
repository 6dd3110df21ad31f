"""The Stage-2 vec-env stack: the Stage-1 stack with the manager's selector and hooks."""

from __future__ import annotations

from typing import Any

from rmtl.reward.kinds.dense import DenseRewardConfig
from rmtl.task import Task
from rmtl.train.config import EnvStackConfig
from rmtl.train.stage2.manager.progress import ProgressSignal
from rmtl.train.stage2.manager.vec_env_hooks import ManagerController, ManagerDecide, ManagerSegments
from rmtl.train.envs.train_env import EnvHooks, build_train_env


def build_stage2_env(stack: EnvStackConfig, task: Task, controller: ManagerController, **kwargs: Any):
    """The Stage-1 stack of :func:`rmtl.train.envs.train_env.build_train_env` with the controller's selector
    driving both the reward and the phase one-hot, its decisions below the reward and its segment
    bookkeeping above the phase one-hot. The progress signal is the one the worker's reward kind names."""
    hooks = EnvHooks(below_reward=lambda venv: ManagerDecide(venv, controller),
                     above_phase=lambda venv: ManagerSegments(venv, controller))
    env = build_train_env(stack, task, phase_selector=controller.selector, hooks=hooks, **kwargs)
    if controller.progress is None:
        # A dense run's progress is its own dense reward; any other run's the default reference.
        weights = stack.reward if isinstance(stack.reward, DenseRewardConfig) else DenseRewardConfig()
        dense = (lambda states: task.dense_reward(states, weights)) if task.dense_reward is not None else None
        controller.progress = ProgressSignal(stack.n_envs, env.reward_env.kind.progress_source,
                                             stack.reward.shaping_config(), dense,
                                             num_phases=env.reward_env.kind.num_phases, rule=controller.rule)
    return env

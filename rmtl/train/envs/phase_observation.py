"""The phase one-hot observation of the learners (reads the state, no rendering)."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from rmtl.errors import ConfigError
from rmtl.micro_tasks import phase_one_hot
from rmtl.reward.phase import PhaseSelector

PHASE_KEY = "phase"
"""Observation key of the phase one-hot."""


def _states(obs: Any) -> np.ndarray:
    return np.asarray(obs["observation"] if isinstance(obs, Mapping) else obs, dtype=np.float32)


def add_phase(obs: Mapping[str, np.ndarray], phases: np.ndarray | int, num_phases: int) -> dict[str, np.ndarray]:
    """A copy of a dict observation (batched or not) with the phase one-hot under ``'phase'``."""
    out = dict(obs)
    out[PHASE_KEY] = phase_one_hot(phases, num_phases)
    return out


def rule_phase_observation(obs: Mapping[str, np.ndarray], rule: PhaseSelector,
                           num_phases: int) -> dict[str, np.ndarray]:
    """Add the phase ``rule`` (the task's) gives the observation's own state (single or batched
    obs), one-hot over the task's ``num_phases`` micro-tasks.

    This is what evaluation uses: the rule needs only the state, no rendering and no VLM.
    """
    state = np.asarray(obs["observation"], dtype=np.float32)
    phases = rule(np.atleast_2d(state), ())
    return add_phase(obs, phases if state.ndim == 2 else int(phases[0]), num_phases)


class PhaseObservation(VecEnvWrapper):
    """Adds the active phase as a one-hot ``'phase'`` entry (Box [0,1]^K, K = ``num_phases``, the
    task's number of micro-tasks) to a dict observation.

    The phase of each returned observation is ``selector(states of those observations)``:
    for the Stage-1 distance rule this is exactly the ``info["reward"]["phase"]`` the reward
    wrapper used on the same state, and it is also right after an auto-reset (where that phase
    describes the terminal state, not the new episode's first observation) and at
    ``reset()`` (where there is no info). A Stage-2 manager passes its
    :class:`~rmtl.reward.ExternalPhaseSelector` so the worker sees the manager's choice.
    """

    def __init__(self, venv: VecEnv, selector: PhaseSelector, num_phases: int):
        space = venv.observation_space
        if not isinstance(space, spaces.Dict) or "observation" not in space.spaces:
            raise ConfigError("PhaseObservation needs a dict observation space with an 'observation' key")
        if PHASE_KEY in space.spaces:
            raise ConfigError(f"observation already has a {PHASE_KEY!r} entry")
        new_space = spaces.Dict(
            {**space.spaces, PHASE_KEY: spaces.Box(0.0, 1.0, shape=(num_phases,), dtype=np.float32)}
        )
        super().__init__(venv, observation_space=new_space)
        self.selector = selector
        self.num_phases = int(num_phases)
        self.last_phases = np.zeros(self.num_envs, dtype=np.int64)

    def _augment(self, obs: Mapping[str, np.ndarray], infos: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
        self.last_phases = np.asarray(self.selector(_states(obs), infos), dtype=np.int64)
        return add_phase(obs, self.last_phases, self.num_phases)

    def reset(self):
        obs = self.venv.reset()
        return self._augment(obs, [{} for _ in range(self.num_envs)])

    def step_wait(self):
        obs, reward, dones, infos = self.venv.step_wait()
        done_idx = [i for i in np.flatnonzero(dones) if isinstance(infos[i].get("terminal_observation"), Mapping)]
        if done_idx:
            # Terminal observations stay in the same space (SB3 bootstraps truncated episodes from them),
            # with the phase of the state the episode ended in.
            term_states = _states(obs).copy()
            for i in done_idx:
                term_states[i] = _states(infos[i]["terminal_observation"])
            term_phases = np.asarray(self.selector(term_states, infos), dtype=np.int64)
            for i in done_idx:
                infos[i]["terminal_observation"] = add_phase(infos[i]["terminal_observation"], int(term_phases[i]),
                                                             self.num_phases)
        return self._augment(obs, infos), reward, dones, infos

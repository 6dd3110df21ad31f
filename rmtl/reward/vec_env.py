"""The one vec-env wrapper that pays every kind of reward (``rmtl.reward.kinds``).

Per step: the states each env's step ended in (the terminal observation's for an env that
just finished; SB3 has already auto-reset it), the selector's active micro-task of each,
the kind's reward for them (shaped by the shared ``shaper``), the shaper's episode reset for
finished envs, and the env's own reward (the +1 success bonus) added when the kind says so.
Like SB3's ``VecMonitor`` writes one ``info["episode"]``, it writes one ``info["reward"]``
dict per env: ``kind``, ``phase``, ``reward`` (before the bonus), ``env`` (the env's own
reward) and the kind's terms (``u``, ``score``, ``scores`` [K], ...).

Terminal frames: an env that needs frames is wrapped in
:class:`~rmtl.reward.terminal_frames.TerminalFrames`, which renders the reward views on a terminal
step before the auto-reset; the other envs are rendered with one ``env_method`` call.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from rmtl.errors import ConfigError
from rmtl.reward.kinds.base import RewardKind
from rmtl.reward.phase import PhaseSelector
from rmtl.reward.shaping import RewardShaper
from rmtl.reward.terminal_frames import TERMINAL_FRAMES

REWARD_INFO = "reward"
"""The info key of a step's reward terms."""


def _observation_states(obs: Any) -> np.ndarray:
    return np.asarray(obs["observation"] if isinstance(obs, dict) else obs, dtype=np.float32)


def step_end_states(obs: Any, dones: np.ndarray, infos: Sequence[dict]) -> np.ndarray:
    """The state each env's step ended in [N, state_dim]: the terminal observation's for an env
    that just finished (its ``obs`` row is already the next episode's first state)."""
    states = _observation_states(obs).copy()
    for i in np.flatnonzero(dones):
        states[i] = _observation_states(infos[i]["terminal_observation"])
    return states


class RewardVecEnv(VecEnvWrapper):
    """Replaces a vec env's reward with ``kind``'s, for the micro-tasks ``selector`` picks, shaped by ``shaper``.

    ``selector`` is the task's rule (:class:`~rmtl.reward.phase.RulePhaseSelector` of
    ``Task.phases``) or a Stage-2 manager's :class:`~rmtl.reward.phase.ExternalPhaseSelector`;
    ``shaper`` defaults to a :class:`RewardShaper` with the kind's number of micro-tasks.
    """

    def __init__(self, venv: VecEnv, kind: RewardKind, selector: PhaseSelector, shaper: RewardShaper | None = None):
        super().__init__(venv)
        self.kind = kind
        self.selector = selector
        self.shaper = shaper or RewardShaper(self.num_envs, num_phases=kind.num_phases)
        if self.shaper.num_envs != self.num_envs or self.shaper.num_phases != kind.num_phases:
            raise ConfigError(f"the shaper is for {self.shaper.num_envs} envs and {self.shaper.num_phases} micro-tasks; "
                              f"the vec env has {self.num_envs} and the {kind.name!r} reward {kind.num_phases}")
        kind.bind(venv)

    def reset(self):
        obs = self.venv.reset()
        self.shaper.reset()
        return obs

    def step_wait(self):
        obs, env_reward, dones, infos = self.venv.step_wait()
        states = step_end_states(obs, dones, infos)
        phases = np.asarray(self.selector(states, infos), dtype=np.int64)
        step = self.kind.step(states, phases, self.shaper, lambda idx: self._render(np.asarray(idx, np.int64), dones, infos))
        self.shaper.reset(np.asarray(dones, dtype=bool))
        env_reward = np.asarray(env_reward, dtype=np.float32)
        reward = step.reward + (env_reward if self.kind.add_env_reward else 0.0)
        for i, info in enumerate(infos):
            info.pop(TERMINAL_FRAMES, None)  # frames are large: do not keep them in the infos
            entry = {"kind": self.kind.name, "phase": int(phases[i]), "reward": float(step.reward[i]),
                     "env": float(env_reward[i])}
            for name, values in step.terms.items():
                v = values[i]
                entry[name] = float(v) if np.ndim(v) == 0 else v
            info[REWARD_INFO] = entry
        return obs, reward.astype(np.float32), dones, infos

    def _render(self, indices: np.ndarray, dones: np.ndarray, infos: Sequence[dict]) -> np.ndarray:
        """Frames of the given envs: cached terminal frames for finished ones, one env_method call for the rest."""
        views, resolution = self.kind.views, self.kind.resolution  # only kinds that need frames render
        frames: list[np.ndarray | None] = [None] * len(indices)
        live = []
        for j, i in enumerate(indices):
            if dones[i]:
                cached = infos[i].get(TERMINAL_FRAMES)
                if cached is None:
                    raise ConfigError(f"env {i} finished without terminal frames; is TerminalFrames the outermost gym wrapper?")
                frames[j] = cached
            else:
                live.append(j)
        if live:
            rendered = self.venv.env_method("render_views", views, resolution, indices=[int(indices[j]) for j in live])
            for j, f in zip(live, rendered):
                frames[j] = f
        if not frames:
            return np.zeros((0, len(views), resolution, resolution, 3), dtype=np.uint8)
        return np.stack(frames)

"""The vec-env hooks of the Stage-2 manager: :class:`ManagerController` (state shared by the
hooks) with :class:`ManagerDecide` below the reward and :class:`ManagerSegments` above the
phase one-hot. They make a decision every H steps (and at every episode start), set it on
the :class:`~rmtl.reward.ExternalPhaseSelector` that drives both the reward's prompt and the
worker's phase one-hot, and collect the :class:`Segment` records REINFORCE trains on.

Timing (same convention as the Stage-1 rule, where the phase of a state is used both to
score the step that arrived at it and as the one-hot of that observation): a decision is
taken on the state s an observation returns, *before* the reward of the step that arrived
at s is scored, so the prompt used for s, the one-hot of s and the next H-1 states are the
decision's. At an episode end the terminal state keeps the old decision (it belongs to the
old segment) and the new episode's first state gets a fresh decision.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Sequence

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from rmtl.micro_tasks import phase_one_hot
from rmtl.reward.phase import ExternalPhaseSelector, PhaseSelector
from rmtl.reward.vec_env import REWARD_INFO
from rmtl.train.stage2.manager.network import ManagerNet, sample_decisions
from rmtl.train.stage2.manager.progress import ProgressSignal


@dataclasses.dataclass
class Segment:
    env: int
    state: np.ndarray
    phase: int
    rule: int
    probs: np.ndarray
    start_step: int
    phi_start: float | None = None
    env_reward: float = 0.0
    worker_reward: float = 0.0
    length: int = 0
    phi_end: float | None = None

    def progress_return(self) -> float:
        """Phi(end) - Phi(start) + success bonus; a first segment starts at the first scored state."""
        start = self.phi_start if self.phi_start is not None else self.phi_end
        return float((self.phi_end or 0.0) - (start or 0.0) + self.env_reward)

    def value(self, kind: str) -> float:
        return self.progress_return() if kind == "progress" else float(self.worker_reward)


class ManagerController:
    """State shared by the two vec-env hooks: the net, the selector, segment counters and the finished segments.

    ``rule`` is the task's phase rule the decisions are compared with (agreement statistics) and
    ``num_phases`` its number of micro-tasks (the net's outputs, the selector's phase ids)."""

    def __init__(self, net: ManagerNet, num_envs: int, *, rule: PhaseSelector, num_phases: int, horizon: int = 3,
                 epsilon: float = 0.2, seed: int = 0, greedy: bool = False, progress: ProgressSignal | None = None):
        self.net = net
        self.num_envs = int(num_envs)
        self.horizon = int(horizon)
        self.epsilon = float(epsilon)
        self.greedy = greedy
        self.rng = np.random.default_rng(seed)
        self.num_phases = int(num_phases)
        self.selector = ExternalPhaseSelector(num_envs, self.num_phases)
        self.rule = rule
        self.progress = progress
        self.open: list[Segment | None] = [None] * self.num_envs
        self.steps_in_segment = np.zeros(self.num_envs, dtype=np.int64)
        self.finished: list[Segment] = []
        self.step_count = 0
        self.step_agree = 0
        self.step_total = 0
        self._pending: dict[int, Segment] = {}

    # ------------------------------------------------------------ decisions
    def decide(self, states: np.ndarray, envs: np.ndarray) -> list[Segment]:
        envs = np.asarray(envs, dtype=np.int64)
        if len(envs) == 0:
            return []
        s = np.asarray(states, dtype=np.float32)[envs]
        phases, probs = sample_decisions(self.net, s, self.epsilon, self.rng, greedy=self.greedy)
        rules = self.rule(s)
        cur = self.selector(np.asarray(states))  # the phases set so far (the selector ignores the states)
        cur[envs] = phases
        self.selector.set(cur)
        self.steps_in_segment[envs] = 0
        return [Segment(int(i), s[j].copy(), int(phases[j]), int(rules[j]), probs[j], self.step_count)
                for j, i in enumerate(envs)]

    def reset(self, states: np.ndarray) -> None:
        self.open = list(self.decide(states, np.arange(self.num_envs)))  # type: ignore[arg-type]
        self._pending = {}

    def on_step_states(self, states: np.ndarray, dones: np.ndarray) -> None:
        """Inner hook (below the reward): segment boundaries of envs that did not just finish."""
        self.step_count += 1
        self.steps_in_segment += 1
        due = np.flatnonzero((self.steps_in_segment >= self.horizon) & ~np.asarray(dones, dtype=bool))
        self._pending = {seg.env: seg for seg in self.decide(states, due)}

    def on_step_end(self, obs: dict[str, np.ndarray], rewards: np.ndarray, dones: np.ndarray,
                    infos: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Outer hook (above the phase one-hot): close segments, decide at episode starts, fix their one-hot."""
        dones = np.asarray(dones, dtype=bool)
        states = np.asarray(obs["observation"], dtype=np.float32).copy()
        for i in np.flatnonzero(dones):
            states[i] = np.asarray(infos[i]["terminal_observation"]["observation"], dtype=np.float32)
        phi = self.progress(states, infos) if self.progress is not None else np.zeros(self.num_envs)
        active = self.selector(states)
        self.step_agree += int((active == self.rule(states)).sum())
        self.step_total += self.num_envs
        for i in range(self.num_envs):
            seg = self.open[i]  # the transition that just happened was taken under this segment's phase
            if seg is None:
                continue
            seg.length += 1
            seg.env_reward += float(infos[i].get(REWARD_INFO, {}).get("env", 0.0))
            seg.worker_reward += float(rewards[i])
            seg.phi_end = float(phi[i])
            if seg.phi_start is None:
                seg.phi_start = float(phi[i])  # first segment of an episode: progress from the first scored state
            if dones[i] or i in self._pending:
                self.finished.append(seg)
                nxt = self._pending.get(i)
                if nxt is not None:
                    nxt.phi_start = float(phi[i])
                self.open[i] = nxt
        self._pending = {}
        done_idx = np.flatnonzero(dones)
        if len(done_idx):
            # New episodes: decide on their first state; the terminal state kept the old phase.
            for seg in self.decide(np.asarray(obs["observation"], dtype=np.float32), done_idx):
                self.open[seg.env] = seg
            obs = dict(obs)
            obs["phase"] = phase_one_hot(self.selector(states), self.num_phases)
        return obs

    def pop_segments(self) -> list[Segment]:
        out, self.finished = self.finished, []
        return out

    def step_agreement(self, reset: bool = True) -> float:
        a = self.step_agree / self.step_total if self.step_total else float("nan")
        if reset:
            self.step_agree = self.step_total = 0
        return a


class ManagerDecide(VecEnvWrapper):
    """Inner hook, directly below the reward wrapper: new decisions at segment boundaries
    are set on the selector before the reward scores the state."""

    def __init__(self, venv: VecEnv, controller: ManagerController):
        super().__init__(venv)
        self.controller = controller

    def reset(self):
        obs = self.venv.reset()
        self.controller.reset(np.asarray(obs["observation"], dtype=np.float32))
        return obs

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        self.controller.on_step_states(np.asarray(obs["observation"], dtype=np.float32), dones)
        return obs, rewards, dones, infos


class ManagerSegments(VecEnvWrapper):
    """Outer hook, directly above the phase one-hot: segment bookkeeping and episode-start decisions."""

    def __init__(self, venv: VecEnv, controller: ManagerController):
        super().__init__(venv)
        self.controller = controller

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        obs = self.controller.on_step_end(obs, rewards, dones, infos)
        return obs, rewards, dones, infos

"""Vec-env wrapper paying the phased reward with an oracle scorer in place of the VLM (diagnostic).

Everything but the scorer is RMTL's: the phase rule picks the active micro-task, the
active score goes through the same :class:`~rmtl.reward.shaping.RewardShaper` (the run's
``reward.shaping``, Table 1 by default), and the env's +1 success bonus is added. The
score of micro-task k is ``initial_low + (initial_high - initial_low) * progress_k`` with
``progress`` from the task's oracle (pick-and-lift: :mod:`rmtl.tasks.fetch_lift.oracle_progress`),
so the shaping's bounds never move and its normalised score u equals the progress.

It reads the privileged state, so it is a reference like the dense reward, never a VLM
variant: it tells whether a failure of a VLM run lies in the scorer or in the rest of the
reward (docs/stage1.md, "Oracle-scored diagnostic").
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from rmtl.phases import PHASES
from rmtl.reward.phase import PhaseSelector, RulePhaseSelector
from rmtl.reward.shaping import RewardShaper, ShapingConfig
from rmtl.reward.wrapper import shape_step, step_end_states

Progress = Callable[[np.ndarray], np.ndarray]
"""states [N, state_dim] -> progress toward each micro-task's goal, [N, K] in [0, 1]."""


class OracleRewardVecEnv(VecEnvWrapper):
    """Replaces the reward with the shaped active-micro-task score of an oracle ``progress`` function.

    ``info`` gets ``oracle_phase``, ``oracle_score`` (active), ``oracle_u``, ``oracle_reward``
    (shaped) and ``env_reward``.
    """

    def __init__(self, venv: VecEnv, progress: Progress, shaping: ShapingConfig | None = None,
                 phase_selector: PhaseSelector | None = None, num_phases: int = len(PHASES), add_env_reward: bool = True):
        super().__init__(venv)
        self.progress = progress
        self.shaping = shaping or ShapingConfig()
        self.phase_selector = phase_selector or RulePhaseSelector()
        self.shaper = RewardShaper(self.num_envs, self.shaping, num_phases)
        self.add_env_reward = add_env_reward

    def scores(self, states: np.ndarray) -> np.ndarray:
        """Oracle scores [N, K] on the scale of the shaping's initial bounds."""
        lo, hi = self.shaping.initial_low, self.shaping.initial_high
        return lo + (hi - lo) * np.asarray(self.progress(states), dtype=np.float64)

    def reset(self):
        obs = self.venv.reset()
        self.shaper.reset()
        return obs

    def step_wait(self):
        obs, env_reward, dones, infos = self.venv.step_wait()
        states = step_end_states(obs, dones, infos)
        scores = self.scores(states)
        phases = np.asarray(self.phase_selector(states, infos), dtype=np.int64)
        active = scores[np.arange(self.num_envs), phases]
        shaped, reward = shape_step(self.shaper, active, phases, dones, env_reward, self.add_env_reward)
        for i, info in enumerate(infos):
            info["oracle_phase"] = int(phases[i])
            info["oracle_score"] = float(active[i])
            info["oracle_u"] = float(shaped.u[i])
            info["oracle_reward"] = float(shaped.reward[i])
            info["env_reward"] = float(env_reward[i])
        return obs, reward, dones, infos

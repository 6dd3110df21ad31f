"""SB3 vectorised-env wrapper paying the phased multi-view VLM reward.

Terminal steps: SB3 vec envs reset a finished sub-env inside ``step_wait``, so after it
returns the sub-env shows the *next* episode's first state. To score the state the
episode actually ended in, every sub-env is wrapped in :class:`TerminalFrames`, which
renders the reward views on a terminal step (before the auto-reset) into
``info["terminal_frames"]``; the state comes from ``info["terminal_observation"]``.
Frames of the other envs are rendered after the step with one ``env_method`` call.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper

from rmtl.env.cameras import MAX_RESOLUTION, MIN_RESOLUTION, resolve_views
from rmtl.errors import ConfigError
from rmtl.reward.config import RewardConfig
from rmtl.reward.phase import PhaseSelector, RulePhaseSelector
from rmtl.reward.scorer import PhasedScorer
from rmtl.reward.shaping import RewardShaper
from rmtl.reward.source import EmbeddingSource, VLMEmbeddingSource
from rmtl.vlm.model import VLM

TERMINAL_FRAMES = "terminal_frames"


class TerminalFrames(gym.Wrapper):
    """Renders the reward views on the last step of an episode into ``info['terminal_frames']``.

    Views and resolution are set by the reward wrapper (:meth:`set_reward_render`); until
    then nothing is rendered. Put it outermost, above any TimeLimit, so it sees truncation.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._views: tuple[str, ...] | None = None
        self._resolution: int | None = None

    def set_reward_render(self, views: Sequence[str], resolution: int) -> None:
        self._views, self._resolution = tuple(views), int(resolution)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if (terminated or truncated) and self._views is not None:
            info = dict(info)
            info[TERMINAL_FRAMES] = self.env.unwrapped.render_views(self._views, self._resolution)
        return obs, reward, terminated, truncated, info


def _observation_states(obs: Any) -> np.ndarray:
    return np.asarray(obs["observation"] if isinstance(obs, dict) else obs, dtype=np.float32)


def step_end_states(obs: Any, dones: np.ndarray, infos: Sequence[dict]) -> np.ndarray:
    """The state each env's step ended in [N, state_dim]: the terminal observation's for an env
    that just finished (its ``obs`` row is already the next episode's first state)."""
    states = _observation_states(obs).copy()
    for i in np.flatnonzero(dones):
        states[i] = _observation_states(infos[i]["terminal_observation"])
    return states


def shape_step(shaper: RewardShaper, active: np.ndarray, phases: np.ndarray, dones: np.ndarray,
               env_reward: np.ndarray, add_env_reward: bool) -> tuple[Any, np.ndarray]:
    """Shape one vec step's active scores, start new episodes in the shaper for finished envs,
    and add the env's success bonus: (ShapingOutput, float32 reward [N])."""
    shaped = shaper(active, phases)
    shaper.reset(np.asarray(dones, dtype=bool))
    reward = shaped.reward + (np.asarray(env_reward, dtype=np.float32) if add_env_reward else 0.0)
    return shaped, reward.astype(np.float32)


class VLMRewardVecEnv(VecEnvWrapper):
    """Replaces the reward of a vec env of FetchPickAndLiftEnv with the shaped phased VLM reward.

    Per step: render the active views of every sub-env, embed all N x V frames through
    ``source`` (batches of ``config.batch_size``), score every phase per view, average
    over the views, pick each env's phase with ``phase_selector``, shape the active
    score, and return it (plus the env's success bonus when ``config.add_env_reward``).
    ``info`` gets ``vlm_scores_per_view`` [V, K], ``vlm_scores`` [K], ``vlm_phase``,
    ``vlm_score`` (active aggregate), ``vlm_u``, ``vlm_reward`` (shaped) and ``env_reward``.

    Arguments: ``vlm`` is loaded from ``config.model`` only when needed (no ``source`` or
    no ``scorer`` given); ``source`` replaces the render-and-embed step (e.g. the FAISS
    cache); ``scorer`` brings precomputed text embeddings; ``phase_selector`` defaults
    to the distance rule.
    """

    def __init__(
        self,
        venv: VecEnv,
        config: RewardConfig | None = None,
        *,
        vlm: VLM | None = None,
        source: EmbeddingSource | None = None,
        scorer: PhasedScorer | None = None,
        phase_selector: PhaseSelector | None = None,
    ):
        super().__init__(venv)
        self.config = config = config or RewardConfig()
        if vlm is None and (source is None or scorer is None):
            from rmtl.vlm.loader import load_vlm

            vlm = load_vlm(config.model, config.device, config.precision)
        self.views = resolve_views(config.active_views)
        self.source = source if source is not None else VLMEmbeddingSource(vlm, config.batch_size)
        self.scorer = scorer if scorer is not None else PhasedScorer.from_config(config, vlm.encode_text)
        if tuple(self.scorer.views) != self.views:
            raise ConfigError(f"scorer views {self.scorer.views} differ from the configured views {self.views}")
        self.phase_selector = phase_selector or RulePhaseSelector()
        self.shaper = RewardShaper(self.num_envs, config.shaping, self.scorer.num_phases)
        self.resolution = self._resolution(config, vlm, self.source)
        wrapped = venv.env_is_wrapped(TerminalFrames)
        if not all(wrapped):
            raise ConfigError(
                "every sub-env must be wrapped in rmtl.reward.TerminalFrames so episode ends are scored before "
                "the auto-reset; build the vec env with rmtl.reward.make_reward_vec_env or wrap each env yourself"
            )
        venv.env_method("set_reward_render", self.views, self.resolution)

    @staticmethod
    def _resolution(config: RewardConfig, vlm: VLM | None, source: Any) -> int:
        if config.resolution is not None:
            return config.resolution
        size = vlm.image_size if vlm is not None else getattr(source, "image_size", None)
        if size is None:
            raise ConfigError("set RewardConfig.resolution: no VLM is loaded to take the input size from")
        return int(min(max(size, MIN_RESOLUTION), MAX_RESOLUTION))

    # ------------------------------------------------------------------ VecEnv API
    def reset(self):
        obs = self.venv.reset()
        self.shaper.reset()
        return obs

    def step_wait(self):
        obs, env_reward, dones, infos = self.venv.step_wait()
        states = step_end_states(obs, dones, infos)

        def render(indices: np.ndarray) -> np.ndarray:
            return self._render(np.asarray(indices, dtype=np.int64), dones, infos)

        embeddings = np.asarray(self.source(states, render))
        if embeddings.ndim != 3 or embeddings.shape[:2] != (self.num_envs, len(self.views)):
            raise ConfigError(
                f"embedding source returned shape {embeddings.shape}; expected [{self.num_envs}, {len(self.views)}, D] for views {self.views}"
            )
        scores = self.scorer(embeddings)
        phases = np.asarray(self.phase_selector(states, infos), dtype=np.int64)
        active = scores.active(phases)
        shaped, reward = shape_step(self.shaper, active, phases, dones, env_reward, self.config.add_env_reward)
        for i, info in enumerate(infos):
            info.pop(TERMINAL_FRAMES, None)  # frames are large: do not keep them in the infos
            info["vlm_scores_per_view"] = scores.per_view[i]
            info["vlm_scores"] = scores.aggregate[i]
            info["vlm_phase"] = int(phases[i])
            info["vlm_score"] = float(active[i])
            info["vlm_u"] = float(shaped.u[i])
            info["vlm_reward"] = float(shaped.reward[i])
            info["env_reward"] = float(env_reward[i])
        return obs, reward, dones, infos

    def _render(self, indices: np.ndarray, dones: np.ndarray, infos: Sequence[dict]) -> np.ndarray:
        """Frames of the given envs: cached terminal frames for finished ones, one env_method call for the rest."""
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
            rendered = self.venv.env_method(
                "render_views", self.views, self.resolution, indices=[int(indices[j]) for j in live]
            )
            for j, f in zip(live, rendered):
                frames[j] = f
        if not frames:
            return np.zeros((0, len(self.views), self.resolution, self.resolution, 3), dtype=np.uint8)
        return np.stack(frames)


def make_reward_vec_env(
    num_envs: int,
    config: RewardConfig | None = None,
    env_config: Any = None,
    *,
    vec_env_cls: type[VecEnv] = DummyVecEnv,
    seed: int | None = None,
    env_fn: Callable[[], gym.Env] | None = None,
    **wrapper_kwargs: Any,
) -> VLMRewardVecEnv:
    """N FetchPickAndLiftEnv (or ``env_fn()``) each in TerminalFrames, vectorised, with the VLM reward."""
    from rmtl.env import FetchPickAndLiftEnv

    def make() -> gym.Env:
        env = env_fn() if env_fn is not None else FetchPickAndLiftEnv(env_config)
        return TerminalFrames(env)

    venv = vec_env_cls([make for _ in range(int(num_envs))])
    if seed is not None:
        venv.seed(seed)
    return VLMRewardVecEnv(venv, config, **wrapper_kwargs)

"""What one task defines, behind one object that configs name (``task: fetch_lift``).

The layers below (storage, env, reward, learners) never import a task: a caller hands them
the parts they need (the key spec to a store or cache, the phase labels to the cached
source). Layers above (pipeline, flows) look a task up by name (:func:`rmtl.tasks.get_task`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from rmtl.config import Config
from rmtl.env.curriculum import CurriculumStage
from rmtl.errors import ConfigError
from rmtl.micro_tasks import MicroTaskSpec
from rmtl.reward.kinds.vlm import RewardConfig
from rmtl.reward.prompts import PromptConfig
from storage.key_spec import KeySpec

Policy = Callable[[Any], np.ndarray]
"""observation -> action."""


@dataclass(frozen=True)
class ScorerConfusion:
    """A region of states where a pixel scorer pays ``micro_task``'s score as if at its goal
    (what the ``degraded_oracle`` reward kind adds to mimic a stand-in VLM's mistakes)."""

    micro_task: str | None
    """The micro-task whose score is confused; None: every micro-task's (a pose paid as the whole task done)."""
    region: Callable[[np.ndarray], np.ndarray]
    """states [N, state_dim] -> bool [N]: the confused states."""
    about: str = ""


@dataclass(frozen=True)
class MapAxis:
    """One axis of the task's learnability map: a metric its ``scorer_metrics`` reports."""

    better: int
    """+1: higher is better; -1: lower is better."""
    chance: float
    """Where a reward without a scorer (a constant score) sits on this axis."""


@dataclass(frozen=True)
class MapPlane:
    """The 2-D view of the learnability map that plots draw: two coordinates of a scorer's metrics."""

    x_label: str
    y_label: str
    point: Callable[[Mapping[str, float]], tuple[float, float]]
    """A scorer's metrics (by axis name) -> its (x, y)."""


@dataclass
class QualityInputs:
    """Per-view embeddings of a set of states with their labels (what ``Task.quality_metrics`` reads)."""

    embeddings: np.ndarray  # [N, V, D]
    states: np.ndarray  # [N, state_dim]
    episode: np.ndarray  # [N]
    step: np.ndarray  # [N]
    views: Sequence[str]


@dataclass(frozen=True)
class Task:
    """One task: its env, state layout and key, micro-tasks, expert, scripted degenerate
    behaviours, curriculum, cameras, reference reward, VLM-training captions and
    reward-quality metrics.

    make_env(config=None, views=..., resolution=..., render=...) returns a Gymnasium env with ``state``
    (the current state row), ``render_views(views, resolution)`` -> uint8 [V, H, W, 3], and
    infos carrying ``step``, ``phase_rule`` and ``is_success``; reset takes
    ``options={"difficulty": u}``.
    """

    name: str
    make_env: Callable[..., Any]
    """(config=None, **overrides) -> env; ``config`` is a run's env config (an ``env_config``)."""
    key_spec: KeySpec
    layout: Callable[[], Mapping[str, Any]]
    """The store's self-description of the state, key and action fields (``rmtl.layout``)."""
    action_dim: int
    micro_tasks: MicroTaskSpec
    phase_measure: Callable[[np.ndarray], np.ndarray]
    """states [N, state_dim] -> the scalar the phase rule bins (e.g. gripper-cube distance)."""
    expert: Callable[[float, int], Policy]
    """(noise_std, seed) -> the scripted expert policy."""
    curriculum_stages: tuple[CurriculumStage, ...]
    camera_bank: Mapping[str, Any]
    env_config: type[Config] | None = None
    """The config class ``make_env`` takes (pick-and-lift: EnvConfig; the default task's is a run's
    ``env`` section, which a task with another env ignores)."""
    render_fps: int | None = None
    """Frames per second of a video of the env (one frame per step)."""
    dense_reward: Callable[..., np.ndarray] | None = None
    """(states, config) -> the dense reference reward (without the success bonus); ``config`` is the
    run's ``dense`` config, which a task may ignore."""
    oracle_progress: Callable[..., np.ndarray] | None = None
    """(states, config) -> progress toward each micro-task's goal, [N, K] in [0, 1] (the oracle-scored diagnostic)."""
    captions: Callable[..., list[str]] | None = None
    """(states, rng) -> one VLM-training caption per state."""
    quality_metrics: Callable[..., dict] | None = None
    """The reward-quality metrics of stored embeddings (within-phase rank metrics and gates)."""
    phase_metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]] | None = None
    """(scores [N, K], states) -> within-phase metrics of micro-task scores (rank correlations,
    spreads, right-prompt accuracy; the parts of ``quality_metrics`` for one set of scores)."""
    quality_gates: Mapping[str, float] = field(default_factory=dict)
    """Acceptance thresholds (metric -> minimum) of the multi-view means ``quality_metrics`` reports:
    what a trained reward VLM must reach on held-out episodes."""
    caption_options: Mapping[str, Any] = field(default_factory=dict)
    """The keywords ``captions`` takes, with their defaults (the shipped model's caption recipe)."""
    caption_prompt_leaks: Callable[[str], list[tuple[str, str]]] | None = None
    """(caption mode) -> (caption, prompt) pairs where a caption the mode can write contains an
    evaluated prompt text (empty for a mode whose captions cannot be listed)."""
    caption_leak_audit: Callable[[Sequence[str]], dict] | None = None
    """(captions) -> what a model card says of them: exact leaks of evaluated prompts and near
    paraphrases of them (by the task's similarity threshold)."""
    soft_target_geometry: Callable[[np.ndarray], np.ndarray] | None = None
    """states [N, state_dim] -> float32 [N, F] in metres: the geometry VLM training compares, so that
    nearby states count as partial positives of each other's captions (soft contrastive targets)."""
    behaviours: Mapping[str, Callable[[float, int | None], Policy]] = field(default_factory=dict)
    """Scripted degenerate behaviours by name: (noise_std, seed) -> a policy for one episode
    (the policies a reward-hacking learner might find; empty when the task has none)."""
    visible_state: Callable[[np.ndarray], np.ndarray] | None = None
    """states [N, state_dim] -> [N, F]: what a camera sees, in metres (the smooth errors of the
    ``degraded_oracle`` reward are functions of it)."""
    scorer_confusions: Mapping[str, ScorerConfusion] = field(default_factory=dict)
    """Named confusions a pixel scorer of this task makes (``degraded_oracle``)."""
    scorer_metrics: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], dict[str, float]] | None = None
    """(scores [N, K], states, episode ids, steps) -> the learnability map's metrics (``rmtl qualify``)."""
    map_axes: Mapping[str, MapAxis] = field(default_factory=dict)
    """The learnability map's axes in order: the metrics ``scorer_metrics`` reports."""
    early_progress_metrics: Callable[..., dict[str, float]] | None = None
    """(scores [N, K or 1], states, replay=(scores, states, episodes, steps), shaping=...) -> what the
    reward pays for the first steps of progress in each phase (``rmtl qualify``; None: not measured)."""
    early_progress_axes: tuple[str, ...] = ()
    """The names ``early_progress_metrics`` reports, in order (a refit with early-progress axes reads them)."""
    map_plane: MapPlane | None = None
    """The map's 2-D view in plots (None: no plot of the map)."""
    learnability_map: Path | None = None
    """The fitted learnability map of this task (JSON shipped with the task's package, read by
    ``rmtl qualify``; refitted by ``rmtl qualify fit-map``); None: not fitted."""
    coverage_scene: Callable[[Any, np.random.Generator, int], tuple[Any, dict]] | None = None
    """(reset env, rng, scene index) -> (observation, info): sets a coverage scene directly, not
    through a policy (rollout policy ``coverage``)."""
    coverage_category: Callable[[int], str] | None = None
    """Scene index -> its category (the label of a coverage store's rows)."""
    trap_poses: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    """(coverage scenes' states [N, state_dim], their scene indices [N]) -> (resting, done) bool [N]:
    poses that have not begun the task's last step and poses that have done it, the two sides of a
    one-score reward's trap ratio (``rmtl qualify``; None: not measured)."""
    lift_height: Callable[[np.ndarray], np.ndarray] | None = None
    """states [N, state_dim] -> height (m) of the lifted object above its rest height (None: the
    task lifts nothing)."""
    episode_goals: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    """states [T, state_dim] of one episode -> (achieved goal [T, G], desired goal [T, G]) as a
    Gymnasium-Robotics goal env observes them (what a Minari export writes)."""
    gate_report: Callable[[dict, dict | None], dict[str, bool]] | None = None
    """(quality metrics, a random-weight model's or None) -> which acceptance checks pass."""
    check_difficulty: Callable[[float], float] | None = None
    """A start difficulty -> itself as a float, or one ConfigError line saying the valid range."""

    def phases(self, states: np.ndarray) -> np.ndarray:
        """Phase ids the task's rule gives states [N, state_dim] (int64 [N])."""
        s = np.asarray(states)
        if s.shape[-1:] != (self.key_spec.state_dim,):
            raise ConfigError(f"phase rule needs states [N, {self.key_spec.state_dim}], got shape {s.shape}")
        return np.atleast_1d(self.micro_tasks.phase(self.phase_measure(s))).astype(np.int64)

    def reward_config(self, config: RewardConfig) -> RewardConfig:
        """A VLM reward config resolved against this task: its prompts against the micro-tasks, its
        views against the camera bank (:meth:`RewardConfig.for_task`)."""
        return config.for_task(self.micro_tasks, tuple(self.camera_bank))

    def prompts(self, configured: PromptConfig | None = None) -> PromptConfig:
        """``configured`` (default: none) resolved against this task's micro-tasks: what it leaves
        unset is the task's own baseline, goals and single goal."""
        return PromptConfig.for_micro_tasks(self.micro_tasks, configured)

    def store_description(self) -> dict[str, Any]:
        """``DatasetStore.create`` keywords describing this task's rows."""
        return {"key_spec": self.key_spec, "layout": self.layout(), "action_dim": self.action_dim}

"""The Fetch pick-and-lift task as one :class:`~rmtl.task.Task`."""

from __future__ import annotations

from dataclasses import asdict
from types import MappingProxyType
from pathlib import Path
from typing import Any

import numpy as np

from rmtl.tasks.fetch_lift.cameras import CAMERA_BANK
from rmtl.tasks.fetch_lift.coverage import coverage_category, coverage_scene
from rmtl.tasks.fetch_lift.trap_poses import trap_poses
from rmtl.tasks.fetch_lift.phases import MICRO_TASKS
from rmtl.task import Task
from rmtl.tasks.fetch_lift.behaviours import BEHAVIOURS
from rmtl.tasks.fetch_lift.captions import CaptionConfig
from rmtl.tasks.fetch_lift.curriculum_stages import PAPER_STAGES
from rmtl.tasks.fetch_lift.dense_reward import DenseRewardConfig, dense_reward
from rmtl.tasks.fetch_lift.early_progress import EARLY_AXES
from rmtl.tasks.fetch_lift.env import EnvConfig, FetchPickAndLiftEnv, check_difficulty
from rmtl.tasks.fetch_lift.layout import ACTION_FIELDS, layout
from rmtl.tasks.fetch_lift.oracle_progress import oracle_progress
from rmtl.tasks.fetch_lift.quality import GATES, MAP_AXES, MAP_PLANE
from rmtl.tasks.fetch_lift.scorer_errors import SCORER_CONFUSIONS, visible_state
from rmtl.tasks.fetch_lift.state import CUBE_POS, KEY_SPEC, gripper_cube_distance, lift_height, soft_target_geometry


def _make_env(config: Any = None, **overrides: Any) -> Any:
    return FetchPickAndLiftEnv(config, **overrides)  # MuJoCo loads when the first env is made


def _expert(noise_std: float, seed: int) -> Any:
    from rmtl.tasks.fetch_lift.expert import ScriptedExpert

    return ScriptedExpert(noise_std=noise_std, seed=seed)


def _dense_reward(states: np.ndarray, config: DenseRewardConfig | None = None) -> np.ndarray:
    return dense_reward(states, config or DenseRewardConfig())


def _captions(states: np.ndarray, rng: np.random.Generator, **kwargs: Any) -> list[str]:
    from rmtl.tasks.fetch_lift.captions import CaptionConfig, sample_captions

    return sample_captions(states, rng, CaptionConfig(**kwargs))


def _caption_prompt_leaks(mode: str) -> list[tuple[str, str]]:
    from rmtl.tasks.fetch_lift.captions import evaluated_prompt_texts, neutral_vocabulary, prompt_leaks

    # Only the neutral mode writes from a finite vocabulary; the compositional one cannot be listed.
    return prompt_leaks(neutral_vocabulary(), evaluated_prompt_texts()) if mode == "neutral" else []


def _caption_leak_audit(captions: Any) -> dict:
    from rmtl.tasks.fetch_lift.neutral_captions import leak_audit

    return leak_audit(captions)


def _quality(*args: Any, **kwargs: Any) -> dict:
    from rmtl.tasks.fetch_lift.quality import reward_quality

    return reward_quality(*args, **kwargs)


def _early_progress_metrics(*args: Any, **kwargs: Any) -> dict:
    from rmtl.tasks.fetch_lift.early_progress import early_progress_metrics

    return early_progress_metrics(*args, **kwargs)


def _map_metrics(*args: Any) -> dict:
    from rmtl.tasks.fetch_lift.quality import map_metrics

    return map_metrics(*args)


def _phase_metrics(scores: np.ndarray, states: np.ndarray) -> dict[str, float]:
    from rmtl.tasks.fetch_lift.quality import phase_metrics

    return phase_metrics(scores, states)


def _gate_report(metrics: dict, random_metrics: dict | None = None) -> dict[str, bool]:
    from rmtl.tasks.fetch_lift.quality import gate_report

    return gate_report(metrics, random_metrics)


def _episode_goals(states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cube's position, and its start position lifted by the success lift (the goal env's goals)."""
    cube = np.asarray(states)[:, CUBE_POS]
    goal = np.broadcast_to(cube[0] + np.array([0.0, 0.0, EnvConfig().success_lift]), cube.shape).copy()
    return cube.copy(), goal


def fetch_lift_task() -> Task:
    """The pick-and-lift task of the paper (App. A)."""
    return Task(
        name="fetch_lift", make_env=_make_env, key_spec=KEY_SPEC, layout=layout, action_dim=len(ACTION_FIELDS),
        micro_tasks=MICRO_TASKS, phase_measure=gripper_cube_distance, expert=_expert,
        curriculum_stages=PAPER_STAGES, camera_bank=CAMERA_BANK, dense_reward=_dense_reward, captions=_captions,
        quality_metrics=_quality, oracle_progress=oracle_progress, behaviours=MappingProxyType(BEHAVIOURS),
        visible_state=visible_state, scorer_confusions=SCORER_CONFUSIONS, quality_gates=MappingProxyType(GATES),
        caption_options=MappingProxyType(asdict(CaptionConfig())), caption_prompt_leaks=_caption_prompt_leaks,
        caption_leak_audit=_caption_leak_audit,
        soft_target_geometry=soft_target_geometry, coverage_scene=coverage_scene, coverage_category=coverage_category,
        trap_poses=trap_poses,
        scorer_metrics=_map_metrics, map_axes=MappingProxyType(MAP_AXES), map_plane=MAP_PLANE,
        early_progress_metrics=_early_progress_metrics, early_progress_axes=EARLY_AXES,
        learnability_map=Path(__file__).with_name("learnability_map.json"), env_config=EnvConfig, render_fps=int(FetchPickAndLiftEnv.metadata["render_fps"]),
        phase_metrics=_phase_metrics, lift_height=lift_height, episode_goals=_episode_goals,
        gate_report=_gate_report, check_difficulty=check_difficulty,
    )

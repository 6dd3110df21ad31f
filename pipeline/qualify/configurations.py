"""The reward configuration ``rmtl qualify`` scores: what a run of a Stage-1 variant will pay.

A configuration is read from the variant itself (``rmtl/train/variants.yaml`` through
``stage1_config``), so qualify and training never disagree on it: the micro-task prompts or the
one global prompt, and the views averaged. A one-score reward (a single prompt, or the oracle's
``single_score``) is measured in every rule phase as the learner sees it: the map's per-phase
metrics read the same score in every phase (:func:`as_phase_columns`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rmtl.errors import ConfigError

VLM_VARIANTS = ("rmtl", "single_prompt_multi_view", "single_prompt_single_view")
"""The paper's VLM configurations (Fig. 5), the ones ``--compare`` takes by default."""


@dataclass(frozen=True)
class RewardConfiguration:
    """What a run's VLM reward scores: the micro-task prompts (or one prompt) over some views."""

    variant: str
    single_prompt: bool
    views: tuple[str, ...]

    @property
    def label(self) -> str:
        what = "one prompt" if self.single_prompt else "micro-task prompts"
        return f"{self.variant} ({what}, {len(self.views)} view{'s' if len(self.views) != 1 else ''})"


def configuration(variant: str, task: Any) -> RewardConfiguration:
    """The reward configuration of a Stage-1 variant whose reward is a VLM's; one line otherwise."""
    from rmtl.reward.kinds.vlm import RewardConfig
    from rmtl.train.config import VARIANTS, stage1_config

    if variant not in VARIANTS:
        raise ConfigError(f"unknown variant {variant!r}; qualify takes a VLM variant such as {', '.join(VLM_VARIANTS)}")
    reward = stage1_config(variant).reward
    if not isinstance(reward, RewardConfig):
        raise ConfigError(f"variant {variant!r} has a {reward.kind!r} reward, not a VLM's; qualify a VLM variant "
                          f"({', '.join(VLM_VARIANTS)}) or a state-reading kind with --reward")
    if reward.single_prompt_band:
        raise ConfigError(f"variant {variant!r} is a control that leaks the rule's phase into a single prompt; "
                          "it is not a reward configuration to choose")
    resolved = task.reward_config(reward)
    return RewardConfiguration(variant, bool(reward.single_prompt), tuple(resolved.active_views))


def as_phase_columns(scores: np.ndarray | None, num_phases: int) -> np.ndarray | None:
    """A one-score reward's scores [N, 1] as the K columns the map's per-phase metrics read (the
    same score in each: it is what every phase pays); K-column scores as they are."""
    if scores is None or scores.shape[1] != 1:
        return scores
    return np.repeat(np.asarray(scores), num_phases, axis=1)


def comparison_rank(rows: list[dict]) -> list[dict]:
    """Configurations best first: by P(teaches) when the map gives every one a P; otherwise all by
    their weakest early-progress gain in ``u`` (the least a learner is paid for its first progress
    in any phase), since a P and an unmapped configuration's axes cannot be set against each other.
    A configuration held by its trap share (``pipeline.qualify.trap``) ranks after every other. The
    second order is not yet validated by runs (docs/reward_quality.md)."""
    def mapped(r: dict) -> bool:
        p = r.get("p_teaches")
        return p is not None and p == p

    def weakest(r: dict) -> float:
        early = [v for k, v in r.get("early_progress", {}).items() if k.endswith("_early_u") and v == v]
        return min(early) if early else -1.0

    def trapped(r: dict) -> bool:
        return r.get("held") == "trap"

    if rows and all(mapped(r) for r in rows):
        return sorted(rows, key=lambda r: (trapped(r), -r["p_teaches"]))
    return sorted(rows, key=lambda r: (trapped(r), -weakest(r)))


__all__ = ["VLM_VARIANTS", "RewardConfiguration", "as_phase_columns", "comparison_rank", "configuration"]

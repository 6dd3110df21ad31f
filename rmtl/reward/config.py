"""The base of the reward kinds' configs, tagged by ``kind``; each kind's own config lives beside
the kind (rmtl.reward.kinds; the VLM reward's in rmtl.reward.kinds.vlm)."""

from __future__ import annotations

from rmtl.config import Config
from rmtl.reward.shaping import ShapingConfig


class RewardKindConfig(Config):
    """Base of each reward kind's config. ``kind`` names the registered kind (rmtl.reward.kinds)
    and picks the config class when a run config is read, so each kind holds only its own fields."""

    kind: str

    def shaping_config(self) -> ShapingConfig:
        """The shaping of this kind's reward; a kind without shaping (the dense reference) gets the
        default, which its shaper never applies."""
        shaping = getattr(self, "shaping", None)
        return shaping if isinstance(shaping, ShapingConfig) else ShapingConfig()

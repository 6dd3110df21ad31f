"""The named Stage-1 variants, read from ``variants.yaml`` (data, one registry every consumer reads).

Kept apart from :mod:`rmtl.train.config` so that commands listing variants import no torch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from rmtl.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Variant:
    """One named variant of ``variants.yaml``: Stage1Config overrides and what they are for."""

    name: str
    role: str
    about: str
    overrides: dict[str, Any]
    analyses: tuple[str, ...] = ()


ROLES = ("paper", "control", "reference", "diagnostic", "option", "record")


def _load_variants(path: Path) -> dict[str, Variant]:
    data = yaml.safe_load(path.read_text())
    out = {}
    for name, v in data.items():
        if v.get("role") not in ROLES:
            raise ConfigError(f"{path}: variant {name!r} has role {v.get('role')!r}; choose from {', '.join(ROLES)}")
        out[name] = Variant(name, v["role"], v.get("about", ""), dict(v.get("overrides") or {}),
                            tuple(v.get("analyses", ())))
    return out


VARIANT_REGISTRY: dict[str, Variant] = _load_variants(Path(__file__).with_name("variants.yaml"))
"""Every named variant (rmtl/train/variants.yaml)."""

VARIANTS: dict[str, dict[str, Any]] = {name: v.overrides for name, v in VARIANT_REGISTRY.items()}
"""Named variants: overrides of :class:`Stage1Config` (nested dicts), nothing else."""


def variant_names(*, role: str | None = None, analysis: str | None = None, reward_kind: str | None = None) -> tuple[str, ...]:
    """Variant names in file order, filtered by role, by an analysis that includes them by default,
    or by reward kind (``reward.kind``; ``vlm`` when the overrides name none)."""
    return tuple(n for n, v in VARIANT_REGISTRY.items()
                 if (role is None or v.role == role) and (analysis is None or analysis in v.analyses)
                 and (reward_kind is None or variant_kind(v) == reward_kind))


def variant_kind(variant: Variant) -> str:
    """The reward kind a variant trains (``overrides.reward.kind``; ``vlm`` when it names none)."""
    return str((variant.overrides.get("reward") or {}).get("kind", "vlm"))

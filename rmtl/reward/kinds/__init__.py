"""Reward kinds, a registry of one module each: ``vlm`` (the phased multi-view VLM reward),
``oracle`` (the same reward with a perfect state-reading scorer, a diagnostic), ``rule_only``
(the phase band with no scorer, a control) and ``dense`` (the hand-written reference).

Add a kind: write a module with a :class:`RewardKind` subclass decorated with
``@register_kind("name")`` and import it below; ``reward_kind: name`` then selects it.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from rmtl.errors import ConfigError
from rmtl.reward.kinds.base import KindStep, ProgressSource, RewardKind

K = TypeVar("K", bound=type[RewardKind])

_KINDS: dict[str, type[RewardKind]] = {}


def register_kind(name: str) -> Callable[[K], K]:
    """Class decorator: register a :class:`RewardKind` under ``name``."""

    def add(cls: K) -> K:
        if name in _KINDS and _KINDS[name] is not cls:
            raise ConfigError(f"reward kind {name!r} is registered twice")
        cls.name = name
        _KINDS[name] = cls
        return cls

    return add


def get_kind(name: str) -> type[RewardKind]:
    """The registered kind class of ``name`` (one-line error naming the known ones)."""
    if name not in _KINDS:
        raise ConfigError(f"unknown reward kind {name!r}; known kinds: {', '.join(sorted(_KINDS))}")
    return _KINDS[name]


def kind_names() -> tuple[str, ...]:
    return tuple(sorted(_KINDS))


# Registration: one import per kind module.
from rmtl.reward.kinds import dense, oracle, rule_only, vlm  # noqa: E402,F401

__all__ = ["KindStep", "ProgressSource", "RewardKind", "get_kind", "kind_names", "register_kind"]

"""Reward kinds, a registry of one module each: ``vlm`` (the phased multi-view VLM reward),
``oracle`` (the same reward with a perfect state-reading scorer, a diagnostic),
``degraded_oracle`` (the oracle with a controlled scorer error, a diagnostic), ``hybrid``
(the VLM for some micro-tasks and the oracle for the others, a diagnostic), ``rule_only``
(the phase band with no scorer, a control) and ``dense`` (the hand-written reference).

Each kind has its own config class (a :class:`~rmtl.reward.config.RewardKindConfig` tagged
``kind: name``), registered with the kind: a run's ``reward`` section is read as the config of
the kind it names, so it holds that kind's fields and no other's.

Add a kind: write a module with a :class:`RewardKind` subclass decorated with
``@register_kind("name", config=ItsConfig)`` and import it below; ``reward: {kind: name}``
then selects it.
"""

from __future__ import annotations

from typing import Any, TypeVar
from collections.abc import Callable, Mapping

from rmtl.errors import ConfigError
from rmtl.reward.config import RewardKindConfig
from rmtl.reward.kinds.base import KindStep, ProgressSource, RewardKind, RunFacts

K = TypeVar("K", bound=type[RewardKind])

_KINDS: dict[str, type[RewardKind]] = {}

DEFAULT_KIND = "vlm"
"""The kind of a ``reward`` section that names none."""


def register_kind(name: str, config: type[RewardKindConfig] | None = None) -> Callable[[K], K]:
    """Class decorator: register a :class:`RewardKind` under ``name`` with its ``config`` class
    (None: the kind is built directly, never from a run config)."""

    def add(cls: K) -> K:
        if name in _KINDS and _KINDS[name] is not cls:
            raise ConfigError(f"reward kind {name!r} is registered twice")
        if config is not None and config.model_fields["kind"].default != name:
            raise ConfigError(f"reward kind {name!r}: its config {config.__name__} must default kind to {name!r}")
        cls.name = name
        cls.config_class = config
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


def kind_config(name: str) -> type[RewardKindConfig]:
    """The config class of the registered kind ``name`` (one-line error naming the kinds that have one)."""
    cls = _KINDS.get(name)
    if cls is None or cls.config_class is None:
        known = ", ".join(n for n in kind_names() if _KINDS[n].config_class is not None)
        raise ConfigError(f"unknown reward kind {name!r}; known kinds: {known}")
    return cls.config_class


def reward_kind_config(data: Mapping[str, Any] | RewardKindConfig) -> RewardKindConfig:
    """A ``reward`` section as the config of the kind it names (``kind``, default vlm)."""
    if isinstance(data, RewardKindConfig):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"a reward section must be a mapping with a kind, not {type(data).__name__}")
    kind = data.get("kind", DEFAULT_KIND)
    if kind is None or not str(kind).strip():  # `--set reward.kind=` reads as no value
        known = ", ".join(n for n in kind_names() if _KINDS[n].config_class is not None)
        raise ConfigError(f"the reward kind is empty; set it to one of {known} (e.g. --set reward.kind=vlm)")
    return kind_config(str(kind)).model_validate(dict(data))


# Registration: one import per kind module.
from rmtl.reward.kinds import dense, oracle, rule_only, vlm  # noqa: E402,F401
from rmtl.reward.kinds import degraded_oracle, hybrid  # noqa: E402,F401  (after oracle and vlm, which they extend)

__all__ = ["DEFAULT_KIND", "KindStep", "ProgressSource", "RewardKind", "RewardKindConfig", "RunFacts", "get_kind",
           "kind_config", "kind_names", "register_kind", "reward_kind_config"]

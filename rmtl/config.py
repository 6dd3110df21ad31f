"""Typed, validated configuration objects (pydantic), loadable from and written to YAML.

Every config forbids unknown keys and is frozen; a bad value becomes a one-line
:class:`~rmtl.errors.ConfigError` naming the field, the value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar
from collections.abc import Iterable, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from rmtl.errors import ConfigError

C = TypeVar("C", bound="Config")

MAX_EPISODES = 1_000_000
"""Most episodes one command rolls out or evaluates: far above any real run (a million
episodes is days of rendering), low enough that a typo (an extra dozen digits) fails at
once instead of building a list of every episode number."""


def format_validation_error(name: str, err: ValidationError) -> str:
    """First problem of a pydantic error as one line: ``<Config>.<field>=<value>: <why>``; a check of
    the whole config (no field) says only its own line, written for the user."""
    e = err.errors()[0]
    more = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    msg = e["msg"].removeprefix("Value error, ")
    if not e["loc"]:
        return f"{msg}{more}"
    loc = ".".join(str(p) for p in e["loc"])
    value = e.get("input")
    shown = repr(value) if not isinstance(value, dict) else "{...}"
    return f"bad config value {name}.{loc}={shown}: {msg}{more}"


class Config(BaseModel):
    """Base of all rmtl configs: frozen, no unknown keys, field docs from docstrings."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, validate_default=True)

    @classmethod
    def make(cls: type[C], **values: Any) -> C:
        """Build and validate, raising :class:`ConfigError` with one line on bad input."""
        try:
            return cls(**values)
        except ValidationError as err:
            raise ConfigError(format_validation_error(cls.__name__, err)) from None

    def replace(self: C, **changes: Any) -> C:
        """A validated copy with some fields changed."""
        return type(self).make(**{**self.model_dump(), **changes})

    @classmethod
    def from_yaml(cls: type[C], path: str | Path) -> C:
        return cls.make(**read_yaml_mapping(Path(path)))

    def to_yaml(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False))
        return p


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` merged in; nested mappings merge, everything else replaces."""
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def nest_dotted(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"reward.resolution": 64, "n_envs": 4}`` -> ``{"reward": {"resolution": 64}, "n_envs": 4}``."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["reward.resolution=64", "n_envs=4"]`` -> nested dict (values parsed as YAML scalars/lists)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.subkey=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        out = deep_merge(out, nest_dotted({key: value}))
    return out


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The mapping in a config YAML file; one line if it is missing, invalid or not a mapping."""
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; pass the path of a YAML file written by rmtl")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass the path of a YAML file written by rmtl")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not a text file (not UTF-8); pass the path of a YAML file "
                          f"written by rmtl") from None
    except yaml.YAMLError as err:
        from rmtl.errors import yaml_problem

        raise ConfigError(f"config file {path} is not valid YAML at {yaml_problem(err)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of field names to values")
    return data

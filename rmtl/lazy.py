"""Package attributes imported on first use (PEP 562), so that importing a package costs nothing
until one of its heavy parts (torch, open_clip, SB3) is used."""

from __future__ import annotations

import importlib
from typing import Any
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``names[name]`` (a module path) on first
    access of ``name`` and keeps the value in the package's namespace."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__

"""User-facing errors: one line saying what was wrong and how to fix it."""

from __future__ import annotations

from storage.errors import StoreError


class RmtlError(Exception):
    """An error caused by user input or the environment, shown as one line by the CLI."""


class ConfigError(RmtlError, ValueError):
    """A bad configuration value or argument."""


class ModelLoadError(RmtlError):
    """A VLM spec that cannot be resolved or whose weights are missing."""


USER_ERRORS: tuple[type[Exception], ...] = (RmtlError, StoreError)
"""Errors shown as one line (exit 2) and never retried: this package's and the storage layer's."""

__all__ = ["RmtlError", "ConfigError", "ModelLoadError", "StoreError", "USER_ERRORS"]

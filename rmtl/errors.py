"""User-facing errors: one line saying what was wrong and how to fix it."""

from __future__ import annotations


class RmtlError(Exception):
    """An error caused by user input or the environment, shown as one line by the CLI."""


class ConfigError(RmtlError, ValueError):
    """A bad configuration value or argument."""


class ModelLoadError(RmtlError):
    """A VLM spec that cannot be resolved or whose weights are missing."""


class StoreError(RmtlError):
    """A dataset store that is missing, foreign, corrupt, locked or of a newer schema."""

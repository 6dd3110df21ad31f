"""User-facing errors: one line saying what was wrong and how to fix it."""

from __future__ import annotations

from storage.errors import StoreError


class RmtlError(Exception):
    """An error caused by user input or the environment, shown as one line by the CLI."""


class ConfigError(RmtlError, ValueError):
    """A bad configuration value or argument."""


class ModelLoadError(RmtlError):
    """A VLM spec that cannot be resolved or whose weights are missing."""


def yaml_problem(err: Exception) -> str:
    """A YAML parse error as one phrase with where it is: ``line L, column C: <problem>`` (PyYAML's
    own text spans several lines and names the place only in a quoted excerpt)."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = " ".join(str(getattr(err, "problem", None) or err).split())
    context = getattr(err, "context", None)
    what = f"{problem} ({' '.join(str(context).split())})" if context and getattr(err, "problem", None) else problem
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark is not None else what


USER_ERRORS: tuple[type[Exception], ...] = (RmtlError, StoreError)
"""Errors shown as one line (exit 2) and never retried: this package's and the storage layer's."""

__all__ = ["RmtlError", "ConfigError", "ModelLoadError", "StoreError", "USER_ERRORS", "yaml_problem"]

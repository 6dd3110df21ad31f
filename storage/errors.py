"""The storage layer's user-facing error (one line saying what is wrong and how to fix it)."""

from __future__ import annotations


class StoreError(Exception):
    """A dataset store that is missing, foreign, corrupt, locked or of a newer schema."""

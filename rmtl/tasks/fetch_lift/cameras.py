"""Pick-and-lift's six-camera bank of the paper (App. A): free cameras around the table."""

from __future__ import annotations

from collections.abc import Iterable

from rmtl.env.cameras import CameraSpec, resolve_views

LOOKAT = (1.3, 0.75, 0.42)
"""Point every camera of the bank looks at (table centre, cube height)."""

CAMERA_BANK: dict[str, CameraSpec] = {
    c.name: c
    for c in (
        CameraSpec("wide_view", 132, -14, 1.5, LOOKAT),
        CameraSpec("front", 180, -20, 1.1, LOOKAT),
        CameraSpec("front_side", 45, -30, 1.2, LOOKAT),
        CameraSpec("isometric", 225, -35, 1.1, LOOKAT),
        CameraSpec("side", 90, -15, 1.2, LOOKAT),
        CameraSpec("close_up", 135, -25, 0.8, LOOKAT),
    )
}
VIEW_NAMES: tuple[str, ...] = tuple(CAMERA_BANK)
"""All view names in bank order; stores and scorers keep this order."""

SINGLE_VIEW = VIEW_NAMES[0]
"""The view of single-view ablations (wide_view): a bank's first view."""


def fetch_views(views: Iterable[str] | str | None) -> tuple[str, ...]:
    """View names validated against this bank, in bank order (None or 'all': all six)."""
    return resolve_views(views, VIEW_NAMES)

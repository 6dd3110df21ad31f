"""Shared fixtures. Importing rmtl first selects EGL offscreen rendering."""

from __future__ import annotations

import os

import pytest

import rmtl  # noqa: F401

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a model hub


@pytest.fixture(scope="session")
def small_env():
    """One pick-and-lift env rendering 2 views at 64 px (session-wide: building it costs ~1 s)."""
    from rmtl.env import FetchPickAndLiftEnv

    env = FetchPickAndLiftEnv(views=("wide_view", "close_up"), resolution=64)
    yield env
    env.close()

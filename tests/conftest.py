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


@pytest.fixture(scope="module")
def random_tiny_vlm():
    """``rmtl-fetch-tiny@random``, loaded once per module: the reward model of the trainer
    tests (loading it sets torch's thread count, restored afterwards)."""
    import torch

    from rmtl.vlm import load_vlm

    threads = torch.get_num_threads()
    torch.manual_seed(0)
    yield load_vlm("rmtl-fetch-tiny@random")
    torch.set_num_threads(threads)

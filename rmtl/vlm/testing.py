"""A tiny OpenCLIP architecture with seeded random weights, for tests and plumbing checks.

Its scores mean nothing; it exists so the whole render -> embed -> score path can run in
seconds on a CPU. Importing this module registers nothing; :func:`tiny_vlm` does.
"""

from __future__ import annotations

import torch

from rmtl.vlm.loader import load_vlm
from rmtl.vlm.model import VLM
from rmtl.vlm.registry import get_registered, register_model

TINY_NAME = "rmtl-test-tiny"
TINY_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "patch_size": 16, "head_width": 32},
    # The vocabulary must match OpenCLIP's BPE tokenizer (49408 ids); the context is
    # deliberately not 77 so code that hard-codes it fails.
    "text_cfg": {"context_length": 24, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


def register_tiny() -> str:
    """Register the tiny architecture once per process; returns its name."""
    if get_registered(TINY_NAME) is None:
        register_model(TINY_NAME, TINY_CONFIG)
    return TINY_NAME


def tiny_vlm(seed: int = 0, device: str | None = "cpu") -> VLM:
    """The tiny architecture with random weights drawn from ``seed`` (global RNG untouched)."""
    register_tiny()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return load_vlm(f"{TINY_NAME}@random", device=device)

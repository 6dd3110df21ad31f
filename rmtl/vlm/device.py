"""Where a model runs: its torch device and its precision, chosen for this machine unless given."""

from __future__ import annotations

import torch

from rmtl.errors import ModelLoadError
from rmtl.vlm.spec import PRECISIONS


def select_device(device: str | torch.device | None = None) -> torch.device:
    """The given device, else CUDA when present, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"device {device!r} is not a torch device; use 'cpu', 'cuda' or 'cuda:N'") from None
    if d.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was asked for but CUDA is not available here; use 'cpu' or leave it unset")
    return d


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bf16 matrix products natively (AVX512-BF16 or AMX), as oneDNN reports."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def select_precision(device: torch.device, precision: str | None = None) -> str:
    """The given precision, else: bf16 autocast on CUDA; bf16 weights on a CPU with native
    bf16 (AVX512-BF16/AMX: ~3.4x the fp32 throughput of the tiny tower, score error
    <= 0.002, results/bench/precision.json); fp32 on other CPUs."""
    if precision is None:
        if device.type == "cuda":
            return "amp_bf16"
        return "bf16" if device.type == "cpu" and cpu_has_bf16() else "fp32"
    if precision not in PRECISIONS:
        raise ModelLoadError(f"precision {precision!r} is not supported; choose from {', '.join(PRECISIONS)}")
    if precision in ("fp16", "amp") and device.type != "cuda":
        raise ModelLoadError(f"precision {precision!r} needs CUDA; use 'fp32' or 'bf16' on CPU")
    return precision

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


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""x86 CPU flags (Linux ``/proc/cpuinfo``) of bf16 matrix instructions."""


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str] | None:
    """The CPU's flags as Linux lists them, or None where that file is not there (not Linux)."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return set()


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bf16 matrix products in hardware (AVX512-BF16 or AMX).

    oneDNN alone is not asked: it reports bf16 on every AVX-512 CPU, where it emulates bf16
    (an Intel Xeon without AVX512-BF16 embedded 3.4x slower in bf16 than an AMD EPYC with it,
    results/bench/run_account.md). On x86 Linux the CPU flags decide; elsewhere oneDNN's answer.
    """
    flags = cpu_flags()
    if flags and any(f in flags for f in ("avx512f", "avx2", "sse2")):  # an x86 CPU: its flags tell
        return any(f in flags for f in NATIVE_BF16_FLAGS)
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

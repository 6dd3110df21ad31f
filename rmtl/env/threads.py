"""Thread pools of a one-job worker process (a Stage-1 env worker, a render worker).

A worker that owns ``threads`` cores sets OpenMP/MKL/OpenBLAS (and torch) to that many
threads before anything starts them. Mesa's llvmpipe, the CPU GL driver, gets
``threads - 1`` helper threads: the thread that calls it is one of the worker's, and with
``LP_NUM_THREADS=0`` it rasterises itself instead of handing every frame to a helper thread
and waiting. The pixels are the same; six 64 px views take 0.76x the time of one helper
thread (docs/stage1.md, "Rendering threads").
"""

from __future__ import annotations

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Thread-pool sizes set to the worker's thread count."""

RASTERISER_VAR = "LP_NUM_THREADS"
"""llvmpipe's helper threads; 0 rasterises in the calling thread. Mesa reads it once, when
the first GL context is made, so it must be set before the worker renders anything."""


def worker_thread_env(threads: int) -> dict[str, str]:
    """The thread-pool variables of a worker that owns ``threads`` cores."""
    threads = max(1, int(threads))
    return {**{var: str(threads) for var in THREAD_VARS}, RASTERISER_VAR: str(threads - 1)}

"""The image tower eager against ``torch.compile`` (``reward.compile``): time per model call and
how far the embeddings move.

One Stage-1 step embeds 16 envs x 6 views = 96 frames in one call (the new path's batch).
For each model, the eager and the compiled model embed the same random frames at its input
size, alternating, ``--repeats`` x ``--calls`` calls per thread count; medians. The
compilation time (at load, and for the timed batch size) is reported too.

    python bench/compile_tower.py --models rmtl-fetch-fast rmtl-fetch-tiny

Writes ``results/bench/compile_tower.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def timed_ms(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1000 * (time.perf_counter() - t0) / calls


def measure(model: str, batch: int, threads: tuple[int, ...], calls: int, repeats: int) -> dict:
    import torch

    from rmtl.vlm import load_vlm

    eager = load_vlm(model)
    t0 = time.perf_counter()
    compiled = load_vlm(model, compile=True)
    load_s = time.perf_counter() - t0
    size = eager.image_size
    frames = np.random.default_rng(0).integers(0, 256, (batch, size, size, 3), dtype=np.uint8)
    t0 = time.perf_counter()
    out = compiled.encode_images(frames)  # compiles for this batch size
    first_call_s = time.perf_counter() - t0
    ref = eager.encode_images(frames)
    row = {"model": model, "precision": eager.precision, "input": size, "batch": batch,
           "compile_at_load_s": round(load_s, 2), "compile_first_batch_s": round(first_call_s, 2),
           "max_abs_embedding_diff": float(np.abs(out - ref).max()),
           "min_cosine": float((out * ref).sum(axis=1).min()), "threads": {}}
    for n in threads:
        torch.set_num_threads(n)
        for _ in range(3):
            eager.encode_images(frames), compiled.encode_images(frames)
        e, c = [], []
        for _ in range(repeats):
            e.append(timed_ms(lambda: eager.encode_images(frames), calls))
            c.append(timed_ms(lambda: compiled.encode_images(frames), calls))
        row["threads"][str(n)] = {"eager_ms": round(statistics.median(e), 3), "compiled_ms": round(statistics.median(c), 3),
                                  "ratio": round(statistics.median(c) / statistics.median(e), 3)}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["rmtl-fetch-fast", "rmtl-fetch-tiny"])
    ap.add_argument("--batch", type=int, default=96)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, min(2, os.cpu_count() or 1)])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "compile_tower.json")
    args = ap.parse_args(argv)

    import rmtl  # noqa: F401
    from rmtl.provenance import run_record

    rows = [measure(m, args.batch, tuple(dict.fromkeys(args.threads)), args.calls, args.repeats) for m in args.models]
    out = {"rows": rows, "load_avg_at_end": os.getloadavg(), "run": run_record()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=str))
    print(f"{'model':18s} {'threads':>7s} {'eager ms':>9s} {'compiled':>9s} {'ratio':>6s}  (batch {args.batch}, medians)")
    for r in rows:
        for n, t in r["threads"].items():
            print(f"{r['model']:18s} {n:>7s} {t['eager_ms']:9.2f} {t['compiled_ms']:9.2f} {t['ratio']:6.2f}")
        print(f"{'':18s} compile {r['compile_at_load_s']} s at load + {r['compile_first_batch_s']} s for the batch; "
              f"max |diff| {r['max_abs_embedding_diff']:.4f}, min cosine {r['min_cosine']:.5f}")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())

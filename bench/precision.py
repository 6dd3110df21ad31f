"""bf16 against fp32 for the reward model: throughput and score error per prompt.

Embeds the same stored frames with the model in fp32 and in the automatic precision
(bf16 on CPUs with native bf16), each with its own text embeddings, and reports images/s
(median of repeats, one thread and all threads, side by side) and the absolute error of
every prompt's goal-baseline score (alpha 0.9) per view and over views.

    python bench/precision.py --store data/stores/gate_full.zarr --rows 1000

Writes ``results/bench/precision.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def throughput(vlm, frames: np.ndarray, threads: int, repeats: int) -> float:
    import torch

    torch.set_num_threads(threads)
    vlm.encode_images(frames[:64], batch_size=64)
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        vlm.encode_images(frames, batch_size=64)
        rates.append(len(frames) / (time.perf_counter() - t0))
    return statistics.median(rates)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--model", default="rmtl-fetch-tiny")
    ap.add_argument("--precision", default=None, help="the precision to compare with fp32 (default: automatic)")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "precision.json")
    args = ap.parse_args(argv)

    import torch

    import rmtl  # noqa: F401
    from rmtl.provenance import portable_values, run_record
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.reward.prompts import embed_prompts
    from rmtl.tasks import get_task
    from rmtl.tasks.fetch_lift.phases import PHASES
    from rmtl.vlm import load_vlm
    from storage.dataset import DatasetStore

    cores = torch.get_num_threads()
    ref = load_vlm(args.model, precision="fp32")
    low = load_vlm(args.model, precision=args.precision)
    with DatasetStore.open(args.store, "r") as st:
        rows = np.linspace(0, st.num_rows - 1, min(args.rows, st.num_rows)).astype(int)
        frames = st.read(rows, fields=["frames"])["frames"]
        views = list(st.views)
    flat = frames.reshape(-1, *frames.shape[2:])
    emb = {}
    for name, vlm in (("fp32", ref), (low.precision, low)):
        torch.set_num_threads(cores)
        e = vlm.encode_images(flat, batch_size=64).reshape(len(rows), len(views), -1)
        text = embed_prompts(vlm.encode_text, get_task().prompts())
        emb[name] = goal_baseline_scores(e, text.goals, text.baseline, 0.9)  # [N, V, K]
    d = np.abs(emb[low.precision] - emb["fp32"])
    agg = np.abs(emb[low.precision].mean(1) - emb["fp32"].mean(1))
    sample = flat[:512]
    speed = {f"{name}_{t}_threads": round(throughput(vlm, sample, t, args.repeats), 1)
             for t in sorted({1, cores}) for name, vlm in (("fp32", ref), (low.precision, low))}
    out = {
        "model": ref.model_id, "precision": low.precision, "rows": int(len(rows)), "images": int(len(flat)),
        "images_per_s_median": speed,
        "score_abs_error_per_prompt": {p: {"mean": round(float(d[..., k].mean()), 5), "p99": round(float(np.percentile(d[..., k], 99)), 5),
                                           "max": round(float(d[..., k].max()), 5),
                                           "multi_view_mean_abs": round(float(agg[:, k].mean()), 5)}
                                       for k, p in enumerate(PHASES)},
        "score_abs_error_per_view_mean": {v: round(float(d[:, i].mean()), 5) for i, v in enumerate(views)},
        "score_range_fp32": [round(float(emb["fp32"].min()), 3), round(float(emb["fp32"].max()), 3)],
        "run": run_record(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(portable_values(out), indent=1, default=str))
    print(f"{'prompt':9s} {'mean':>8s} {'p99':>8s} {'max':>8s} {'mv mean':>8s}   ({low.precision} vs fp32, {len(flat)} images)")
    for p, r in out["score_abs_error_per_prompt"].items():
        print(f"{p:9s} {r['mean']:8.5f} {r['p99']:8.5f} {r['max']:8.5f} {r['multi_view_mean_abs']:8.5f}")
    print("images/s (median):", speed)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

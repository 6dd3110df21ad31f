"""Training speed of the reward model's image tower on this machine: images/s of forward,
backward and an AdamW step, fp32 against bf16 autocast, side by side (medians of repeats).

Sizes a retraining of the image tower (e.g. on learner-like states) before starting one.

    python bench/image_tower_training.py --model rmtl-fetch-tiny --batch 64 --repeats 5 \
        --out results/bench/image_tower_training.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def images_per_s(visual, batch, precision: str, steps: int) -> float:
    import torch

    opt = torch.optim.AdamW(visual.parameters(), lr=1e-5)
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())

    def step() -> None:
        opt.zero_grad()
        with autocast:
            loss = visual(batch).float().pow(2).mean()
        loss.backward()
        opt.step()

    step()  # warm-up
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return len(batch) * steps / (time.perf_counter() - t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="rmtl-fetch-tiny")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3, help="optimiser steps timed per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "image_tower_training.json")
    args = ap.parse_args(argv)

    import torch

    from rmtl.provenance import run_record
    from rmtl.vlm import load_vlm

    if args.threads:
        torch.set_num_threads(args.threads)
    vlm = load_vlm(args.model, precision="fp32")
    visual = vlm.model.visual.train()
    batch = torch.randn(args.batch, 3, vlm.image_size, vlm.image_size)
    runs = {p: [] for p in ("fp32", "bf16")}
    for _ in range(args.repeats):
        for p in runs:  # alternating, so load drifts hit both alike
            runs[p].append(round(images_per_s(visual, batch, p, args.steps), 1))
    med = {p: statistics.median(v) for p, v in runs.items()}
    out = {"images_per_s_median": med, "bf16_over_fp32": round(med["bf16"] / med["fp32"], 2), "runs": runs,
           "model": args.model, "parameters": sum(q.numel() for q in visual.parameters()),
           "image_size": vlm.image_size, "batch": args.batch, "threads": torch.get_num_threads(),
           "run": run_record()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=str))
    print(f"image tower ({out['parameters'] / 1e6:.1f}M parameters, {vlm.image_size} px, batch {args.batch}, "
          f"{out['threads']} threads): fp32 {med['fp32']:.0f} img/s, bf16 autocast {med['bf16']:.0f} img/s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

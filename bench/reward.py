"""Reward scorer benchmark: images/s through the scorer vs the raw model forward pass.

For one batch of N x V frames it times
- ``raw``: the image tower alone on already-preprocessed pixels (``VLM.forward_images``);
- ``scorer``: uint8 frames -> tensor preprocessing -> image tower -> normalisation ->
  goal-baseline scores of every phase and view -> view mean (what the reward wrapper does
  per step, minus rendering);
- ``pil``: the model's own PIL transform per image, then the tower (for reference),
and reports the overhead ratio raw / scorer (1.0 = no overhead). Median of --repeats
interleaved runs (the machine may be shared: check the spread by re-running).

    python bench/reward.py [--models rmtl-fetch-tiny@random ViT-S-32@random] [--batch 64]
                           [--views 6] [--resolution N] [--out results/bench/reward.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from rmtl.tasks.fetch_lift.cameras import VIEW_NAMES
from rmtl.provenance import run_record
from rmtl.reward import PhasedScorer, RewardConfig, VLMEmbeddingSource
from rmtl.tasks import get_task
from rmtl.vlm import load_vlm


def median_rates(fns: dict, images: int, repeats: int) -> dict[str, float]:
    """Median images/s of each function; runs are interleaved so background load hits all alike."""
    for fn in fns.values():
        fn()  # warm-up: allocator, kernels, lazy init
    rates: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            rates[name].append(images / (time.perf_counter() - t))
    return {name: statistics.median(r) for name, r in rates.items()}


def bench_model(spec: str, batch: int, views: int, resolution: int | None, repeats: int, device: str | None) -> dict:
    vlm = load_vlm(spec, device=device)
    res = resolution or vlm.image_size
    view_names = VIEW_NAMES[:views]
    config = get_task().reward_config(RewardConfig.make(model=spec, views=view_names, batch_size=batch))
    scorer = PhasedScorer.from_config(config, vlm.encode_text)
    source = VLMEmbeddingSource(vlm, batch)
    n_states = max(1, batch // views)
    n_images = n_states * views
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (n_states, views, res, res, 3), dtype=np.uint8)
    flat = frames.reshape(n_images, res, res, 3)
    pixels = vlm.preprocess_frames(flat)

    def sync():
        if vlm.device.type == "cuda":
            torch.cuda.synchronize()

    def raw():
        vlm.forward_images(pixels)
        sync()

    def scored():
        _ = scorer(source.embed_frames(frames)).aggregate

    def pil():
        x = torch.stack([vlm.preprocess(Image.fromarray(f)) for f in flat])
        vlm.forward_images(x)
        sync()

    rates = median_rates({"raw": raw, "scorer": scored, "pil": pil}, n_images, repeats)
    raw_ips, scorer_ips, pil_ips = rates["raw"], rates["scorer"], rates["pil"]
    return {
        "model": spec, "model_id": vlm.model_id, "device": str(vlm.device), "precision": vlm.precision,
        "input_size": vlm.image_size, "frame_resolution": res, "images": n_images, "views": views,
        "raw_images_per_s": raw_ips, "scorer_images_per_s": scorer_ips, "pil_images_per_s": pil_ips,
        "overhead_ratio": raw_ips / scorer_ips,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["rmtl-fetch-tiny@random"])
    ap.add_argument("--batch", type=int, default=64, help="images per batch (rounded down to whole states)")
    ap.add_argument("--views", type=int, default=6, choices=range(1, len(VIEW_NAMES) + 1))
    ap.add_argument("--resolution", type=int, default=None, help="frame size (default: the model's input size)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", type=Path, default=Path("results/bench/reward.json"))
    args = ap.parse_args()

    rows = [bench_model(m, args.batch, args.views, args.resolution, args.repeats, args.device) for m in args.models]
    result = {"rows": rows, "repeats": args.repeats, "statistic": "median",
              "torch_threads": torch.get_num_threads(), "record": run_record()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))

    print(f"{'model':<28} {'dev':>4} {'px':>4} {'imgs':>5} {'raw img/s':>10} {'scorer img/s':>13} {'PIL img/s':>10} {'overhead':>9}")
    for r in rows:
        print(f"{r['model']:<28} {r['device']:>4} {r['frame_resolution']:>4} {r['images']:>5} {r['raw_images_per_s']:>10.1f} "
              f"{r['scorer_images_per_s']:>13.1f} {r['pil_images_per_s']:>10.1f} {r['overhead_ratio']:>9.3f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

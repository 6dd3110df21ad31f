"""What the readers' chunk-existence check costs: reads of a store with the check and without it.

Zarr reads a missing chunk as fill values, so readers first check that the chunks they read
exist (storage.dataset_read, ``_require_chunks``: a listing, once per chunk row per open
store). This times, side by side in one run, on each store given:

- ``open + read states``: open the store and read state, episode and step of every row (what
  query, return ranking and BC labels do first);
- ``open + read frames``: open and read every frame (what embed and VLM training do);
- ``random rows``: open and read the frames of 256 random rows (a training batch's pattern).

Each arm runs alternately with the check and with it switched off, ``--repeats`` times;
medians and the ratio checked / unchecked go to ``results/bench/chunk_check.json`` and a table.

    python bench/chunk_check.py --store data/stores/fast/train_expert.zarr [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", nargs="+", required=True)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "chunk_check.json")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import storage.dataset_read as reader
    from rmtl.provenance import cpu_model, run_record
    from storage.dataset import DatasetStore

    cls = next(c for c in vars(reader).values() if isinstance(c, type) and "_require_chunks" in vars(c))
    checked = cls._require_chunks

    def unchecked(self, node, a, idx):
        return None

    arms = {
        "open + read states": lambda p, rng: DatasetStore.open(p, "r").read(fields=["state", "episode", "step"]),
        "open + read frames": lambda p, rng: DatasetStore.open(p, "r").read(fields=["frames"]),
        "random rows": lambda p, rng: (lambda s: s.read(rows=np.sort(rng.choice(s.num_rows, 256, replace=False)),
                                                        fields=["frames"]))(DatasetStore.open(p, "r")),
    }
    results = []
    for path in args.store:
        with DatasetStore.open(path, "r") as s:
            rows, chunks = s.num_rows, s.info.get("chunking")
        for name, fn in arms.items():
            times = {"checked": [], "unchecked": []}
            for rep in range(args.repeats):
                for mode in ("checked", "unchecked"):
                    cls._require_chunks = checked if mode == "checked" else unchecked
                    rng = np.random.default_rng(rep)
                    t = time.perf_counter()
                    fn(path, rng)
                    times[mode].append(time.perf_counter() - t)
            cls._require_chunks = checked
            med = {m: statistics.median(v) for m, v in times.items()}
            results.append({"store": path, "rows": rows, "chunking": chunks, "arm": name,
                            "median_s": {m: round(v, 4) for m, v in med.items()},
                            "ratio_checked_over_unchecked": round(med["checked"] / med["unchecked"], 3),
                            "times_s": times})
            print(f"{Path(path).name:32s} {rows:7d} rows  {name:20s} checked {med['checked']:.3f} s  "
                  f"unchecked {med['unchecked']:.3f} s  ratio {med['checked'] / med['unchecked']:.2f}", flush=True)
    import torch

    out = {"results": results, "repeats": args.repeats,
           "machine": {"host": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(),
                       "cuda": torch.cuda.is_available(), "load_avg_at_end": os.getloadavg()},
           "run": run_record()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=str))
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

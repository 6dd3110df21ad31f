"""What the readers' chunk-existence check costs: reads of a store with the check and without it.

Zarr reads a missing chunk as fill values, so readers first check that the chunks they read
exist (storage.dataset_read, ``_require_chunks``: a listing, once per chunk row per open
store). This times, side by side in one run, on each store given:

- ``open + read states``: open the store and read state, episode and step of every row (what
  query, return ranking and BC labels do first);
- ``open + read frames``: open and read every frame (what embed and VLM training do);
- ``random rows``: open and read the frames of 256 random rows (a training batch's pattern).

Each arm runs in turn (rotating order) with the check as readers do it (``checked``: a stat per
chunk file on a local disk), with the check by one listing of the array (``listing``: what object
storage uses) and with the check switched off, ``--repeats`` times; medians and the ratios to
unchecked go to ``results/bench/chunk_check.json``, and a table is printed. The check alone
(both ways, on a freshly opened store) is timed too: a full read's end-to-end time varies with
memory reuse by more than the check costs.

    python bench/chunk_check.py --store data/stores/fast/train_expert.zarr [--repeats 7]

A large store for it: ``--replicate N --build OUT.zarr`` first writes OUT.zarr, the rows of the
(first) ``--store`` appended N times with the store's own writer (episode ids offset per copy),
so its chunk files and listings grow as a rendered store's would, and benches that.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", nargs="+", required=True)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "chunk_check.json")
    ap.add_argument("--replicate", type=int, default=0, help="copies of --store's rows in the --build store")
    ap.add_argument("--build", type=Path, help="the large store to write (with --replicate) and bench")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.replicate:
        if args.build is None:
            ap.error("--replicate needs --build OUT.zarr")
        build_replicated(args.store[0], args.build, args.replicate)
        args.store = [str(args.build)]
    import storage.dataset_read as reader
    from rmtl.provenance import cpu_model, portable_values, run_record
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
    def check_only(p: str, nodes: list[str], rows: Any) -> float:
        """Seconds the check itself takes for ``rows`` of ``nodes`` on a freshly opened store."""
        s = DatasetStore.open(p, "r")
        idx = rows(s) if callable(rows) else slice(0, s.num_rows)
        t = time.perf_counter()
        for node in nodes:
            checked(s, node, s._arrays[node], idx)
        return time.perf_counter() - t

    direct = {
        "open + read states": (["state", "episode", "step"], None),
        "open + read frames": (["frames"], None),
        "random rows": (["frames"], lambda s: np.sort(np.random.default_rng(0).choice(s.num_rows, 256, replace=False))),
    }
    results = []
    for path in args.store:
        with DatasetStore.open(path, "r") as s:
            rows, chunks = s.num_rows, s.info.get("chunking")
        for name, fn in arms.items():
            modes = ("checked", "listing", "unchecked")
            times: dict[str, list[float]] = {m: [] for m in modes}
            for rep in range(args.repeats):
                # the order rotates: whichever arm runs first also pays for freeing the last result
                for mode in modes[rep % 3:] + modes[:rep % 3]:
                    cls._require_chunks = unchecked if mode == "unchecked" else checked
                    reader._STAT_LOCAL = mode != "listing"
                    rng = np.random.default_rng(rep)
                    gc.collect()  # the last arm's result is freed before the clock starts
                    t = time.perf_counter()
                    fn(path, rng)
                    times[mode].append(time.perf_counter() - t)
            cls._require_chunks, reader._STAT_LOCAL = checked, True
            nodes, rows_of = direct[name]
            check_s = {"stat": [], "listing": []}
            for _ in range(args.repeats):
                for mode in check_s:
                    reader._STAT_LOCAL = mode == "stat"
                    check_s[mode].append(check_only(path, nodes, rows_of))
            reader._STAT_LOCAL = True
            med = {m: statistics.median(v) for m, v in times.items()}
            results.append({"store": path, "rows": rows, "chunking": chunks, "arm": name,
                            "median_s": {m: round(v, 4) for m, v in med.items()},
                            "ratio_checked_over_unchecked": round(med["checked"] / med["unchecked"], 3),
                            "ratio_listing_over_unchecked": round(med["listing"] / med["unchecked"], 3),
                            "check_only_median_s": {m: round(statistics.median(v), 4) for m, v in check_s.items()},
                            "times_s": times})
            print(f"{Path(path).name:20s} {rows:6d} rows  {name:20s} checked {med['checked']:.3f} s  listing "
                  f"{med['listing']:.3f} s  unchecked {med['unchecked']:.3f} s  ratios {med['checked'] / med['unchecked']:.2f}"
                  f" / {med['listing'] / med['unchecked']:.2f}; the check alone: stat "
                  f"{statistics.median(check_s['stat']):.3f} s, listing {statistics.median(check_s['listing']):.3f} s",
                  flush=True)
    import torch

    out = {"results": results, "repeats": args.repeats,
           "machine": {"host": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(),
                       "cuda": torch.cuda.is_available(), "load_avg_at_end": os.getloadavg()},
           "run": run_record()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(portable_values(out), indent=1, default=str))
    print(f"-> {args.out}")
    return 0


def build_replicated(src: str, out: Path, copies: int) -> None:
    """Write ``out``: the rows of store ``src`` appended ``copies`` times (episode ids offset)."""
    from storage.dataset import DatasetStore

    with DatasetStore.open(src, "r") as s:
        info = s.info
        rows = {**s.read(), **s.read(fields=["frames"])}
        views, resolution = s.views, s.resolution
    episodes = int(rows["episode"].max()) + 1
    kw = {k: info[k] for k in ("layout", "visual_domain", "renderer") if info.get(k) is not None}
    with DatasetStore.create(out, views=views, resolution=resolution, state_dim=int(rows["state"].shape[1]),
                             key_dim=int(rows["key"].shape[1]), provenance={"kind": "bench", "replicated": src,
                                                                            "copies": copies},
                             overwrite=True, **kw) as w:
        for c in range(copies):
            w.append({**rows, "episode": rows["episode"] + c * episodes})
            print(f"build {out.name}: copy {c + 1}/{copies}, {w.num_rows} rows", flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""Renders a round's families (families.yaml) of the stand-in, one store each, one after another,
as `rmtl render-and-embed` renders one (embedded with the untrained model, which nothing reads).

    python experiments/reward_vlm/rmtl-fetch-fast/render_families.py --round 1 [--learner RUN_DIR]

``--learner``: the run whose checkpoints make the round's learner families (round 1: an optional
running Stage-1 oracle run; round 2: the RMTL run on round 1's pixel reward). Stores go to
``--stores`` (default $RMTL_DATA_DIR/stores/fast). Prints a timestamp per family.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, format_summary, preflight, render_and_embed

from families import POLICIES, load_families, round_families, round_spec  # this script's folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round", type=int, required=True)
    ap.add_argument("--learner", type=Path, default=None)
    ap.add_argument("--stores", type=Path, default=Path(os.environ.get("RMTL_DATA_DIR", "data")) / "stores" / "fast")
    ap.add_argument("--policies", type=Path, default=POLICIES, help="holds runs/<run>/best/model.zip")
    a = ap.parse_args(argv)
    data = load_families()
    render = round_spec(data, a.round)["render"]
    print(f"start {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}", flush=True)
    for name, params in round_families(a.round, policies=a.policies, learner=a.learner, data=data):
        cfg = RenderAndEmbedConfig.make(store=str(a.stores / f"{name}.zarr"), model=data["model"], render=render,
                                        workers=1, **params)
        preflight(cfg)
        print(format_summary(render_and_embed(cfg)), flush=True)
        print(f"{name} done {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

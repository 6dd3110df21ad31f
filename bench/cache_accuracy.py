"""How wrong is a cache hit? Score and shaped-reward error of atlas lookups, per radius.

Queries are the rows of held-out stores (whole episodes with fresh embeddings of the
same model and renderer as the atlas). For each radius, every query state is looked up
in the atlas catalogue (storage.catalogue); a hit replaces the state's fresh embeddings
by the nearest stored state's (``nn``) or by the inverse-distance mean of the ``k``
nearest within the radius, renormalised (``knn``). Then, with the RMTL reward (micro-task
prompts, rule phase, Table-1 shaping with running bounds, pipeline.analyses.return_ranking):

- hit rate;
- mean |error| of the active multi-view score, on hits and on all steps;
- mean |error| of the shaped reward, on hits and on all steps (the shaper runs over each
  episode once with fresh scores and once with the cache's, so trend and momentum
  errors are counted where they arise).

    python bench/cache_accuracy.py --atlas data/stores/atlas_*.zarr --queries data/stores/gate_lod75_noaa.zarr

Writes ``results/bench/cache_accuracy.json`` and ``.png`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def knn_embeddings(catalogue, keys: np.ndarray, radius: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-distance mean of the k nearest stored embeddings within radius: (hit [B], emb [B, V, D])."""
    cands = []
    for cache in catalogue.caches:
        d2, ids = cache._index.search(np.ascontiguousarray(keys, np.float32), k)
        cands.append((np.sqrt(np.maximum(d2, 0)), ids, cache._emb))
    dist = np.concatenate([c[0] for c in cands], axis=1)
    order = np.argsort(dist, axis=1)[:, :k]
    out = np.zeros((len(keys), *cands[0][2].shape[1:]), np.float32)
    hit = np.zeros(len(keys), bool)
    offsets = np.cumsum([0] + [k] * len(cands))
    for b in range(len(keys)):
        w_sum, acc = 0.0, 0.0
        for j in order[b]:
            if dist[b, j] > radius:
                continue
            c = int(np.searchsorted(offsets, j, side="right") - 1)
            row = cands[c][1][b, j - offsets[c]]
            if row < 0:
                continue
            w = 1.0 / max(dist[b, j], 1e-4)
            acc = acc + w * cands[c][2][row].astype(np.float32)
            w_sum += w
        if w_sum:
            v = acc / w_sum
            out[b] = v / np.linalg.norm(v, axis=-1, keepdims=True)
            hit[b] = True
    return hit, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--atlas", nargs="+", required=True)
    ap.add_argument("--queries", nargs="+", required=True)
    ap.add_argument("--model", default="rmtl-fetch-tiny")
    ap.add_argument("--radii", nargs="+", type=float, default=[0.005, 0.01, 0.02, 0.03, 0.05])
    ap.add_argument("--knn", type=int, default=8)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "cache_accuracy.json")
    args = ap.parse_args(argv)

    import rmtl  # noqa: F401
    from rmtl.reward.replay import shaped_rewards
    from pipeline.stores.store_models import resolve_model_id
    from pipeline.stores.stored_text import stored_text_embeddings
    from rmtl.env.render_settings import RENDERER_V1_ID
    from rmtl.tasks.fetch_lift.phases import rule_phase
    from rmtl.provenance import portable_values, run_record
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.tasks import get_task
    from rmtl.reward.shaping import ShapingConfig
    from rmtl.tasks.fetch_lift.state import KEY_SPEC, gripper_cube_distance
    from storage.catalogue import StoreCatalogue
    from storage.dataset import DatasetStore

    t0 = time.perf_counter()
    with DatasetStore.open(args.queries[0], "r") as q0:
        model_id = resolve_model_id(q0, args.model)
        renderer = q0.renderer_id or RENDERER_V1_ID
        text = stored_text_embeddings(q0, model_id, get_task().prompts())
    cat = StoreCatalogue.open(args.atlas, model_id, renderer_id=renderer, unrecorded_renderer_id=RENDERER_V1_ID)
    states, emb, episodes, offset = [], [], [], 0
    for path in args.queries:
        with DatasetStore.open(path, "r") as st:
            n = st.embedded_rows(model_id)
            cols = st.read(slice(0, n), fields=["state", "episode", "step"])
            states.append(cols["state"])
            emb.append(st.embeddings(model_id, slice(0, n)).astype(np.float32))
            for e in np.unique(cols["episode"]):
                idx = np.flatnonzero(cols["episode"] == e)
                episodes.append(offset + idx[np.argsort(cols["step"][idx])])
            offset += n
    states, emb = np.concatenate(states), np.concatenate(emb)
    phase = rule_phase(np.asarray(gripper_cube_distance(states)))
    rows = np.arange(len(states))
    keys = cat.state_keys(states, KEY_SPEC)
    shaping = ShapingConfig()

    def active(e):
        return goal_baseline_scores(e, text.goals, text.baseline, 0.9).mean(axis=1)[rows, phase]

    fresh_active = active(emb)
    fresh_reward = shaped_rewards(fresh_active, phase, episodes, shaping, 3, bounds="running")
    results = []
    for radius in args.radii:
        for mode in ("nn", "knn"):
            if mode == "nn":
                res, cached16 = cat.fetch(keys, radius)
                hit, cached = res.hit, cached16.astype(np.float32)
            else:
                hit, cached = knn_embeddings(cat, keys, radius, args.knn)
            mixed = emb.copy()
            mixed[hit] = cached[hit]
            a = active(mixed)
            r = shaped_rewards(a, phase, episodes, shaping, 3, bounds="running")
            ds, dr = np.abs(a - fresh_active), np.abs(r - fresh_reward)
            results.append({
                "radius": radius, "mode": mode, "hit_rate": round(float(hit.mean()), 4),
                "score_mae_hits": round(float(ds[hit].mean()), 5) if hit.any() else None,
                "score_mae_all": round(float(ds.mean()), 5),
                "shaped_mae_hits": round(float(dr[hit].mean()), 5) if hit.any() else None,
                "shaped_mae_all": round(float(dr.mean()), 5),
            })
            print(results[-1], flush=True)
    sizes = {s.path: s.num_rows for s in cat.stores}
    out = {"atlas": sizes, "atlas_rows": int(sum(sizes.values())), "queries": args.queries, "query_rows": int(len(states)),
           "model": model_id, "renderer_id": renderer, "knn": args.knn,
           "fresh_shaped_reward_step_change_mean_abs": round(float(np.mean(np.abs(np.diff(fresh_reward)))), 5),
           "seconds": round(time.perf_counter() - t0, 1), "run": run_record(), "results": results}
    cat.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(portable_values(out), indent=1, default=str))
    _plot(results, args.out.with_suffix(".png"), out["atlas_rows"])
    print(f"{'radius':>7s} {'mode':>4s} {'hits':>6s} {'score hits':>10s} {'all':>8s} {'shaped hits':>11s} {'all':>8s}")
    for r in results:
        f = lambda x: "-" if x is None else f"{x:.4f}"  # noqa: E731
        print(f"{r['radius']:7.3f} {r['mode']:>4s} {r['hit_rate']:6.3f} {f(r['score_mae_hits']):>10s} "
              f"{f(r['score_mae_all']):>8s} {f(r['shaped_mae_hits']):>11s} {f(r['shaped_mae_all']):>8s}")
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


def _plot(results, path: Path, atlas_rows: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for mode, style in (("nn", "-o"), ("knn", "--s")):
        rs = [r for r in results if r["mode"] == mode]
        x = [r["radius"] for r in rs]
        ax[0].plot(x, [r["hit_rate"] for r in rs], style, label=mode)
        ax[1].plot(x, [r["score_mae_all"] for r in rs], style, label=f"score, {mode}")
        ax[1].plot(x, [r["shaped_mae_all"] for r in rs], style, alpha=0.6, label=f"shaped reward, {mode}")
    ax[0].set(xlabel="radius (m, key space)", ylabel="hit rate", title=f"atlas of {atlas_rows} states")
    ax[1].set(xlabel="radius (m, key space)", ylabel="mean |error| over all steps", title="error vs fresh rendering")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())

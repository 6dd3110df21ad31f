"""Does coverage data help a scorer on learners' states? Linear probes on a frozen image tower.

    python experiments/stand_in/probe_coverage.py --model rmtl-fetch-tiny [--coverage 3000] [--out results/stand_in]

A probe (ridge regression on the concatenated per-view embeddings of the frozen tower) predicts
the oracle's progress toward each micro-task from pixels. It is trained on (a) policy families only
(noisy experts and the degenerate behaviours, at seeds no other set uses) and (b) the same plus
``--coverage`` coverage scenes (states set directly, rollout policy ``coverage``), and tested on the
qualification set's learner families (committed Stage-1 policies; never in either training set),
with the map's metrics (``Task.scorer_metrics``). Everything is rendered on the model's declared
renderer through ``render-and-embed`` (stores under <data dir>/stand_in/<model>/, resumable).
Writes probe_<model>.json and .md to ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from pipeline.qualify import METRICS, file_slug, load_families, model_scores, scorer_metrics, state_set
from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, render_and_embed
from pipeline.stores.store_models import resolve_model_id
from rmtl.provenance import data_dir, portable_path
from rmtl.tasks import get_task
from storage.dataset import DatasetStore

REPO = Path(__file__).resolve().parents[2]
POLICY_FAMILIES = {
    "noisy_expert": {"policy": "expert", "noise_levels": [0.0, 0.1, 0.3, 0.6], "episodes": 40},
    **{b: {"policy": f"behaviour:{b}", "noise_std": 0.05, "episodes": 5}
       for b in ("sit_at_cube", "grasp_and_drop", "hover_0.03", "hover_0.15", "push", "touch_and_leave",
                 "closed_jaw_approach", "wander")},
}
"""The policy families of probe (a), at seed 810000 (the qualification set uses 700000)."""
SEED = 810_000


def store_rows(model: str, store: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(features [N, V*D], states, episode, step) of a rendered, embedded store."""
    with DatasetStore.open(str(store), "r") as ds:
        mid = resolve_model_id(ds, model)
        n = ds.embedded_rows(mid)
        cols = ds.read(slice(0, n), fields=["state", "episode", "step"])
        emb = np.asarray(ds.embeddings(mid, slice(0, n)), dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=-1, keepdims=True)
    return emb.reshape(len(emb), -1), cols["state"], cols["episode"], cols["step"]


def render(model: str, root: Path, name: str, **rollout) -> Path:
    cfg = RenderAndEmbedConfig.make(model=model, store=str(root / f"{name}.zarr"), seed=SEED, **rollout)
    render_and_embed(cfg, progress=True)
    return cfg.store_path()


def main(argv: list[str] | None = None) -> int:
    from sklearn.linear_model import RidgeCV

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="rmtl-fetch-tiny")
    ap.add_argument("--coverage", type=int, default=3000)
    ap.add_argument("--out", type=Path, default=REPO / "results/stand_in")
    a = ap.parse_args(argv)
    task_name, families = load_families()
    task = get_task(task_name)
    slug = file_slug(a.model)
    root = data_dir() / "stand_in" / slug
    policy = [store_rows(a.model, render(a.model, root, n, **f)) for n, f in POLICY_FAMILIES.items()]
    cover = store_rows(a.model, render(a.model, root, "coverage", policy="coverage", episodes=a.coverage))
    # Held-out test: the qualification set's learner families, scored through the same stores qualify uses.
    learners = [f for f in families if f.group == "learner"]
    rows = state_set(task_name, learners, data_dir() / "qualification" / "full" / "states")
    qual_root = data_dir() / "qualification" / "full" / "models" / slug
    model_scores(a.model, task_name, learners, qual_root, rows)  # renders and embeds them if not yet done
    test = [store_rows(a.model, qual_root / f"{f.name}.zarr") for f in learners]

    def stack(parts):
        return [np.concatenate([p[i] for p in parts]) for i in range(4)]

    x_test, s_test, e_test, t_test = stack(test)
    p_test = np.asarray(task.oracle_progress(s_test))
    results = {}
    for label, parts in (("policy families", policy), ("policy + coverage", policy + [cover])):
        x, s, _, _ = stack(parts)
        probe = RidgeCV(alphas=np.logspace(-3, 3, 13)).fit(x, np.asarray(task.oracle_progress(s)))
        pred = probe.predict(x_test)
        # Episode ids are unique per store only: offset them per learner family.
        offsets = np.concatenate([np.full(len(p[0]), 10_000 * i) for i, p in enumerate(test)])
        from pipeline.qualify import StateSet

        held = StateSet(s_test, e_test + offsets, t_test, np.zeros(len(s_test), bool), np.zeros(len(s_test), str))
        results[label] = {"train_rows": int(len(x)), "alpha": float(probe.alpha_),
                          "test_r2": float(probe.score(x_test, p_test)),
                          "metrics": scorer_metrics(task, pred, held)}
        per_family = {}
        start = 0
        for f, p in zip(learners, test):
            m = np.zeros(len(s_test), bool)
            m[start:start + len(p[0])] = True
            start += len(p[0])
            per_family[f.name] = scorer_metrics(task, pred, held, m)
        results[label]["per_family"] = per_family
    a.out.mkdir(parents=True, exist_ok=True)
    report = {"model": a.model, "coverage_scenes": a.coverage, "test_rows": int(len(x_test)),
              "stores": portable_path(root), "results": results}
    (a.out / f"probe_{slug}.json").write_text(json.dumps(report, indent=1))
    head = ["probe trained on", "rows", *METRICS, "R^2 on learners"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, r in results.items():
        lines.append("| " + " | ".join([label, str(r["train_rows"]), *(f"{r['metrics'][k]:.3f}" for k in METRICS),
                                        f"{r['test_r2']:.3f}"]) + " |")
    (a.out / f"probe_{slug}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

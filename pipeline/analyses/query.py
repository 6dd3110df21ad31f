"""Reward-quality queries over a dataset store, from stored embeddings only.

:func:`run_queries` answers four questions and writes tables (printed with rich), PNG
plots and one JSON of every number into an output directory:

1. **correlation**: Spearman of each micro-task score (view mean) with minus the task's
   phase measure (pick-and-lift: the gripper-cube distance) within each rule phase, with the
   p5-p95 score spread (rank correlations of a near-constant score are noise), plus the
   task's reward-quality metrics (``Task.quality_metrics``; pick-and-lift:
   rmtl.tasks.fetch_lift.quality) for the mean and every view, or None for a task without them.
2. **flatness**: along each episode, the single global prompt's reward vs the active
   micro-task reward: mean |step change|, within-episode range (max - min) and Spearman
   with minus the phase measure (does it track progress at all?). None (and no plot) for a
   task whose single goal is its baseline (a micro-task spec without ``single``).
3. **per-view variance**: per view and for the mean, the variance of the active score,
   its mean within-phase variance, its step-to-step variation within a phase, and the
   mean disagreement (std over views per row).
4. **cache**: hit rate vs reward error for a set of radii. Part of the episodes are held
   out as queries, the others are indexed (a flat FAISS index of the store's keys, like
   storage.cache); a query hits when its nearest indexed key is within the radius, and
   its reward error is |active score of the neighbour's embeddings - active score of its
   own embeddings| (phase from the query's own state, as in training).

The store's task (pipeline.stores.store_models.store_task) gives the micro-tasks, the phase rule,
the phase measure, the default prompts and the quality metrics.

Files: ``queries.json``, ``correlation.png``, ``flatness.png``, ``per_view_variance.png``,
``cache_radius.png`` (docs/analysis.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from pipeline.analyses.plots import figure, shade_phases
from pipeline.stores.analysis_dataset import json_default
from pipeline.stores.questions import PromptedQuestion
from pipeline.stores.store_models import resolve_model_id, store_prompts, store_task
from pipeline.stores.store_rows import (
    StoreRows,
    active,
    load_rows,
    open_store,
    per_view_scores,
    source_attrs,
    step_deltas,
)
from pipeline.stores.stored_text import prompts_record, text_embeddings
from rmtl.errors import ConfigError
from rmtl.provenance import portable_values
from rmtl.reward.projection import DEFAULT_ALPHA
from rmtl.reward.prompt_sets import PromptSet
from rmtl.reward.prompts import PromptConfig
from rmtl.reward.quality_stats import spearman, spread

DEFAULT_RADII: tuple[float, ...] = (0.0, 0.002, 0.005, 0.01, 0.02)
"""Cache radii (key units, metres) compared by default."""


# ----------------------------------------------------------------------------- the four queries
def correlation_query(mean_scores: np.ndarray, rows: StoreRows) -> dict[str, Any]:
    """Spearman(score_k, -measure) and spread of every micro-task k within every rule phase."""
    out: dict[str, Any] = {}
    for p, phase in enumerate(rows.phase_names):
        m = rows.phase == p
        out[phase] = {"count": int(m.sum())}
        for k, task in enumerate(rows.phase_names):
            out[phase][task] = {"spearman": spearman(mean_scores[m, k], -rows.distance[m]),
                                "spread": spread(mean_scores[m, k])}
    return out


def _episode_stats(x: np.ndarray, rows: StoreRows, ep_idx: np.ndarray) -> dict[str, float]:
    xs = x[ep_idx]
    d = np.abs(np.diff(xs))
    return {"mean_abs_step_change": float(d.mean()) if len(d) else float("nan"),
            "range": float(np.ptp(xs)) if len(xs) else float("nan"),
            "spearman_neg_distance": spearman(xs, -rows.distance[ep_idx])}


def flatness_query(single: np.ndarray, micro: np.ndarray, rows: StoreRows) -> dict[str, Any]:
    """Per-episode flatness of the single-prompt reward vs the active micro-task reward
    (both view means); medians over episodes plus the per-episode values."""
    per_episode = []
    for e in rows.episode_ids():
        idx = rows.episode_index(e)
        per_episode.append({"episode": e, "steps": int(len(idx)),
                            "single": _episode_stats(single, rows, idx), "micro": _episode_stats(micro, rows, idx)})

    def med(kind: str, key: str) -> float:
        vals = [ep[kind][key] for ep in per_episode if ep[kind][key] == ep[kind][key]]
        return float(np.median(vals)) if vals else float("nan")

    keys = ("mean_abs_step_change", "range", "spearman_neg_distance")
    summary = {kind: {k: med(kind, k) for k in keys} for kind in ("single", "micro")}
    summary["range_ratio_micro_over_single"] = (summary["micro"]["range"] / summary["single"]["range"]
                                                if summary["single"]["range"] > 0 else float("nan"))
    summary["global_spread"] = {"single": spread(single), "micro": spread(micro)}
    return {"median_over_episodes": summary, "episodes": per_episode}


def per_view_variance_query(per_view_active: np.ndarray, views: Sequence[str], rows: StoreRows) -> dict[str, Any]:
    """Variance, within-phase variance and step variation of the active score per view and for the mean."""
    cols = {v: per_view_active[:, i] for i, v in enumerate(views)}
    cols["mean"] = per_view_active.mean(axis=1)
    out: dict[str, Any] = {}
    for name, x in cols.items():
        within = [float(x[rows.phase == p].var()) for p in range(len(rows.phase_names)) if (rows.phase == p).sum() > 1]
        d = step_deltas(x, rows)
        out[name] = {"variance": float(x.var()), "within_phase_variance": float(np.mean(within)) if within else float("nan"),
                     "step_variation": float(d.mean()) if len(d) else float("nan")}
    std = per_view_active.std(axis=1)
    out["disagreement"] = {"mean_std_over_views": float(std.mean()), "p95_std_over_views": float(np.percentile(std, 95))}
    return out


def split_holdout(rows: StoreRows, holdout: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """(indexed, query) indices into rows: whole held-out episodes, or random rows when
    the store has a single episode."""
    rng = np.random.default_rng(seed)
    eps = np.asarray(rows.episode_ids())
    if len(eps) >= 2:
        n = int(np.clip(round(holdout * len(eps)), 1, len(eps) - 1))
        held = rng.permutation(eps)[:n]
        q = np.isin(rows.episode, held)
        how = f"{n} of {len(eps)} episodes held out"
    else:
        q = np.zeros(len(rows), bool)
        q[rng.permutation(len(rows))[: max(1, int(round(holdout * len(rows))))]] = True
        how = f"{int(q.sum())} of {len(rows)} rows held out (single episode)"
    return np.flatnonzero(~q), np.flatnonzero(q), how


def nearest(index_keys: np.ndarray, query_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest indexed key of each query: (position into index_keys, L2 distance)."""
    import faiss

    index = faiss.IndexFlatL2(index_keys.shape[1])
    index.add(np.ascontiguousarray(index_keys, dtype=np.float32))
    d2, ids = index.search(np.ascontiguousarray(query_keys, dtype=np.float32), 1)
    return ids[:, 0].astype(np.int64), np.sqrt(np.maximum(d2[:, 0], 0)).astype(np.float64)


def cache_query(mean_scores: np.ndarray, keys: np.ndarray, rows: StoreRows, radii: Sequence[float],
                holdout: float = 0.25, seed: int = 0) -> dict[str, Any]:
    """Hit rate and reward error of a cache of the indexed rows, queried with the held-out rows."""
    idx_rows, q_rows, how = split_holdout(rows, holdout, seed)
    nbr_pos, dist = nearest(keys[idx_rows], keys[q_rows])
    nbr = idx_rows[nbr_pos]
    phase = rows.phase[q_rows]
    own = mean_scores[q_rows, phase]
    cached = mean_scores[nbr, phase]
    err = np.abs(cached - own)
    table = []
    for r in radii:
        hit = dist <= float(r)
        table.append({
            "radius": float(r), "hit_rate": float(hit.mean()),
            "mean_abs_error_hits": float(err[hit].mean()) if hit.any() else float("nan"),
            "p95_abs_error_hits": float(np.percentile(err[hit], 95)) if hit.any() else float("nan"),
            # misses are rendered fresh (error 0): the error training actually sees
            "mean_abs_error_all": float(np.where(hit, err, 0.0).mean()),
        })
    return {"split": how, "indexed_rows": int(len(idx_rows)), "query_rows": int(len(q_rows)),
            "nearest_distance": {"median": float(np.median(dist)), "p10": float(np.percentile(dist, 10)),
                                 "p90": float(np.percentile(dist, 90))},
            "active_score_spread": spread(mean_scores[np.arange(len(rows)), rows.phase]),
            "radii": table}


# ----------------------------------------------------------------------------- driver
def run_queries(
    store: Any,
    model_id: str | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    radii: Sequence[float] = DEFAULT_RADII,
    prompts: PromptConfig | PromptSet | None = None,
    holdout: float = 0.25,
    seed: int = 0,
    show: bool = True,
    plots: bool = True,
) -> dict[str, Any]:
    """Answer the reward-quality questions for a store (module docstring); print rich
    tables when ``show``, write ``queries.json`` and the PNGs into ``out_dir`` (default
    ``<store>.analysis/queries``). ``model_id``: a stored model id or a model spec (None:
    the store's only model). Returns the JSON-able dict, with ``files``."""
    from pipeline.stores.analysis_dataset import default_out_dir
    from rmtl.task import QualityInputs

    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha must be in [0, 1], got {alpha}")
    if not radii or any(r < 0 for r in radii):
        raise ConfigError(f"radii must be a non-empty list of values >= 0, got {list(radii)}")
    if not 0.0 < holdout < 1.0:
        raise ConfigError(f"holdout must be a fraction in (0, 1), got {holdout}")
    if isinstance(prompts, PromptSet) and prompts.single_prompt:
        raise ConfigError(f"prompt set {prompts.name} is single-prompt; the queries compare one goal per micro-task "
                          f"with the single goal (rmtl prompt-study ranks single-prompt sets too)")
    with open_store(store) as st:
        model_id = resolve_model_id(st, model_id)
        task = store_task(st)
        prompts = store_prompts(st, prompts)
        rows = load_rows(st, model_id, any_task=True)
        text = text_embeddings(st, model_id, prompts)
        texts = prompts.prompts if isinstance(prompts, PromptSet) else prompts
        has_single = texts.single != texts.baseline
        single_text = text_embeddings(st, model_id, prompts, single_prompt=True) if has_single else None
        pv = per_view_scores(st, model_id, text, [alpha], rows.rows)[0]  # [N, V, K]
        single_pv = per_view_scores(st, model_id, single_text, [alpha], rows.rows)[0][..., 0] if has_single else None
        keys = st.read(fields=["key"])["key"][rows.rows]
        emb = st.embeddings(model_id, rows.rows)
        views = list(st.views)
        source = source_attrs(st, model_id)
        policy = st.info.get("provenance", {}).get("policy")
        out = Path(out_dir) if out_dir is not None else default_out_dir(st) / "queries"
    mean = pv.mean(axis=1)  # [N, K]
    per_view_active = active(pv, rows.phase, row_axis=0)  # [N, V]
    micro = per_view_active.mean(axis=1)
    single = single_pv.mean(axis=1) if has_single else None  # view mean [N]
    quality = None if task.quality_metrics is None else task.quality_metrics(
        QualityInputs(emb, rows.state, rows.episode, rows.step, views), text.goals, text.baseline, alpha)
    del emb
    result: dict[str, Any] = {
        **source, "task": task.name, "phases": list(rows.phase_names), "measure": rows.measure,
        "alpha": float(alpha), "prompts": prompts_record(st, prompts), "policy": policy, "rows": len(rows),
        "episodes": len(rows.episode_ids()),
        "correlation": correlation_query(mean, rows),
        "quality": quality,
        "flatness": flatness_query(single, micro, rows) if has_single else None,
        "per_view_variance": per_view_variance_query(per_view_active, views, rows),
        "cache": cache_query(mean, keys, rows, radii, holdout, seed),
    }
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    if plots:
        files["correlation"] = str(plot_correlation(out / "correlation.png", result["correlation"], micro, rows))
        if has_single:
            files["flatness"] = str(plot_flatness(out / "flatness.png", single, micro, rows, result["flatness"]))
        files["per_view_variance"] = str(plot_per_view_variance(out / "per_view_variance.png", result["per_view_variance"], views))
        files["cache"] = str(plot_cache(out / "cache_radius.png", result["cache"]))
    files["json"] = str(out / "queries.json")
    result["files"] = files
    (out / "queries.json").write_text(json.dumps(portable_values(_strict(result)), indent=1, default=json_default))
    if show:
        print_tables(result)
    return result


def _strict(o: Any) -> Any:
    """NaN/inf -> None, so queries.json is strict JSON (NaN marks 'undefined', e.g. an empty phase)."""
    if isinstance(o, dict):
        return {k: _strict(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_strict(v) for v in o]
    if isinstance(o, (float, np.floating)) and not np.isfinite(o):
        return None
    return o


# ----------------------------------------------------------------------------- tables
def _f(x: Any, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "n/a" if x != x else f"{x:.{digits}g}"
    return str(x)


def print_tables(result: dict[str, Any], console: Any = None) -> None:
    """The query results as rich tables."""
    from rich.console import Console
    from rich.table import Table

    c = console or Console()
    c.print(f"[bold]{result['store']}[/bold]: {result['rows']} rows, {result['episodes']} episodes "
            f"(policy {result['policy']}), model {result['model_id']}, alpha {result['alpha']}")

    phases = result["phases"]
    t = Table(title=f"Spearman(micro-task score, -{result['measure']}) within each rule phase (p5-p95 spread)")
    t.add_column("rule phase")
    t.add_column("rows", justify="right")
    for task in phases:
        t.add_column(f"{task} score", justify="right")
    for phase in phases:
        r = result["correlation"][phase]
        t.add_row(phase, str(r["count"]), *[f"{_f(r[k]['spearman'], 3)} ({_f(r[k]['spread'], 2)})" for k in phases])
    c.print(t)

    if result["flatness"] is None:
        c.print(f"flatness: skipped (task {result['task']} has no single goal apart from its baseline)")
    else:
        _print_flatness(c, result["flatness"]["median_over_episodes"])

    pvv = result["per_view_variance"]
    t = Table(title="Per-view variance of the active score")
    for col in ("view", "variance", "within-phase variance", "step variation (in phase)"):
        t.add_column(col, justify="right" if col != "view" else "left")
    for name, r in pvv.items():
        if name == "disagreement":
            continue
        t.add_row(name, _f(r["variance"]), _f(r["within_phase_variance"]), _f(r["step_variation"]))
    c.print(t)
    c.print(f"view disagreement (std over views per row): mean {_f(pvv['disagreement']['mean_std_over_views'])}, "
            f"p95 {_f(pvv['disagreement']['p95_std_over_views'])}")

    ca = result["cache"]
    t = Table(title=f"Cache hit rate vs reward error ({ca['split']}; active-score spread {_f(ca['active_score_spread'])})")
    for col in ("radius (m)", "hit rate", "mean |err| on hits", "p95 |err| on hits", "mean |err| all steps"):
        t.add_column(col, justify="right")
    for r in ca["radii"]:
        t.add_row(_f(r["radius"]), _f(r["hit_rate"], 3), _f(r["mean_abs_error_hits"]), _f(r["p95_abs_error_hits"]),
                  _f(r["mean_abs_error_all"]))
    c.print(t)
    c.print("wrote " + ", ".join(result.get("files", {}).values()))


def _print_flatness(c: Any, fl: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title="Flatness along episodes: single global prompt vs active micro-task (median over episodes)")
    t.add_column("reward")
    for col in ("mean |step change|", "episode range", "Spearman(-measure)", "p5-p95 over rows"):
        t.add_column(col, justify="right")
    for kind, label in (("single", "single prompt"), ("micro", "micro-task (active)")):
        t.add_row(label, _f(fl[kind]["mean_abs_step_change"]), _f(fl[kind]["range"]),
                  _f(fl[kind]["spearman_neg_distance"], 3), _f(fl["global_spread"][kind]))
    c.print(t)
    c.print(f"micro-task / single-prompt episode range: {_f(fl['range_ratio_micro_over_single'], 3)}")


# ----------------------------------------------------------------------------- plots
def plot_correlation(path: Path, corr: dict[str, Any], micro: np.ndarray, rows: StoreRows) -> Path:
    fig, axes = figure(11, 4, 1, 2)
    ax = axes[0, 0]
    phases = rows.phase_names
    mat = np.array([[corr[p][k]["spearman"] for k in phases] for p in phases], dtype=float)
    im = ax.imshow(np.nan_to_num(mat, nan=0.0), cmap="RdBu_r", vmin=-1, vmax=1)
    for i in range(len(phases)):
        for j in range(len(phases)):
            ax.text(j, i, _f(float(mat[i, j]), 2), ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(phases)), [f"{k} score" for k in phases])
    ax.set_yticks(range(len(phases)), [f"{p} rows" for p in phases])
    ax.set_title("Spearman(score, -measure) within rule phase")
    fig.colorbar(im, ax=ax)
    ax = axes[0, 1]
    for p, name in enumerate(phases):
        m = rows.phase == p
        ax.scatter(rows.distance[m], micro[m], s=6, color=f"C{p}", label=name)
    ax.set_xlabel(rows.measure)
    ax.set_ylabel("active micro-task score (view mean)")
    ax.set_title("active score vs phase measure")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return path


def plot_flatness(path: Path, single: np.ndarray, micro: np.ndarray, rows: StoreRows, flat: dict[str, Any]) -> Path:
    fig, axes = figure(11, 4, 1, 2)
    ax = axes[0, 0]
    eps = flat["episodes"]
    e = max(eps, key=lambda r: (r["steps"], -r["episode"]))["episode"]
    idx = rows.episode_index(e)
    st = rows.step[idx]
    shade_phases(ax, st, rows.phase[idx], rows.phase_names)
    ax.plot(st, single[idx] - single[idx].mean(), color="#7f7f7f", lw=2, label="single prompt")
    ax.plot(st, micro[idx] - micro[idx].mean(), color="#d62728", lw=2, label="micro-task (active)")
    ax.set_xlabel("step")
    ax.set_ylabel("reward - episode mean")
    ax.set_title(f"episode {e}: single prompt vs micro-task")
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    r_single = [r["single"]["range"] for r in eps]
    r_micro = [r["micro"]["range"] for r in eps]
    x = np.arange(len(eps))
    ax.bar(x - 0.2, r_single, 0.4, color="#7f7f7f", label="single prompt")
    ax.bar(x + 0.2, r_micro, 0.4, color="#d62728", label="micro-task")
    ax.set_xticks(x, [str(r["episode"]) for r in eps], fontsize=7)
    ax.set_xlabel("episode")
    ax.set_ylabel("within-episode range")
    ax.set_title("within-episode reward range")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return path


def plot_per_view_variance(path: Path, pvv: dict[str, Any], views: Sequence[str]) -> Path:
    names = [*views, "mean"]
    fig, axes = figure(10, 3.6, 1, 2)
    for ax, key, title in ((axes[0, 0], "step_variation", "step-to-step variation (within phase)"),
                           (axes[0, 1], "within_phase_variance", "within-phase variance")):
        vals = [pvv[n][key] for n in names]
        ax.bar(range(len(names)), vals, color=["#4c72b0"] * len(views) + ["k"])
        ax.set_xticks(range(len(names)), names, rotation=25, fontsize=8)
        ax.set_title(title)
    fig.savefig(path, dpi=110)
    return path


def plot_cache(path: Path, cache: dict[str, Any]) -> Path:
    fig, axes = figure(6.5, 4)
    ax = axes[0, 0]
    r = [row["radius"] for row in cache["radii"]]
    ax.plot(r, [row["hit_rate"] for row in cache["radii"]], "o-", color="#1f77b4", label="hit rate")
    ax.set_xlabel("cache radius (m, key space)")
    ax.set_ylabel("hit rate", color="#1f77b4")
    ax.set_ylim(-0.02, 1.02)
    ax2 = ax.twinx()
    ax2.plot(r, [row["mean_abs_error_hits"] for row in cache["radii"]], "s--", color="#d62728", label="|err| on hits")
    ax2.plot(r, [row["mean_abs_error_all"] for row in cache["radii"]], "^-", color="#ff9896", label="|err| all steps")
    ax2.set_ylabel("mean |reward error|", color="#d62728")
    ax2.legend(fontsize=8, loc="center right")
    ax.set_title(f"cache: {cache['split']}")
    fig.savefig(path, dpi=110)
    return path


class QueryConfig(PromptedQuestion):
    """``rmtl query``: reward-quality questions over a store."""

    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""
    radii: tuple[float, ...] = DEFAULT_RADII
    """Cache radii (m) for hit rate vs reward error."""
    holdout: float = 0.25
    """Fraction of episodes used as cache queries."""


def run(cfg: QueryConfig) -> dict[str, Any]:
    """The reward-quality questions a config asks (tables printed, JSON and PNGs written)."""
    from pipeline.stores.questions import prompt_set_of

    return run_queries(cfg.store, cfg.model, out_dir=cfg.out, alpha=cfg.alpha, radii=list(cfg.radii),
                       holdout=cfg.holdout, prompts=prompt_set_of(cfg.prompts))

"""A prompt study: many prompt sets ranked on one store, from stored embeddings only.

The image embeddings are read once; each set is scored with its stored text embeddings
(``rmtl embed-text`` adds them without rendering or an image-model call). Per set, over
the store's episode rows (rule phase from the state, as everywhere in the analysis):

- **within-phase ranks** (rmtl.tasks.fetch_lift.quality.phase_metrics of the view-mean scores):
  Spearman of the approach / align score with minus the gripper-cube distance in its
  phase, grasp AUC of lifted vs resting states; each with its p5-p95 **spread**;
- **right-prompt accuracy**: on states showing what a micro-task prompt describes, the
  share where that prompt scores highest (not defined for a single-prompt set);
- **return-ranking AUC**: ROC AUC of successful vs failed episodes for the shaped return
  and the mean shaped reward per step (pipeline.analyses.return_ranking: Table-1 shaping, reward
  steps only, adapted bounds by default);
- **flatness against the single prompt** (as pipeline.analyses.query.flatness_query): median
  within-episode range and step change of the set's active reward and of its single goal's
  reward, and their range ratio (1 for a single-prompt set, which is its own reference).

Sets are ranked by ``rank_score``, the mean of the three within-phase ranks (approach
Spearman, align Spearman, grasp AUC), which every set has. Writes ``prompt_study.json``,
``prompt_study.csv`` and ``prompt_study.png`` into ``<store>.analysis/prompt_study`` or
``out_dir`` (docs/analysis.md).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from pipeline.stores.questions import StoreQuestion
from pipeline.stores.store_models import store_prompts
from rmtl.errors import ConfigError
from rmtl.provenance import json_safe, portable_values
from rmtl.reward.projection import DEFAULT_ALPHA
from rmtl.reward.prompt_sets import PromptSet

RANK_KEYS = ("approach_spearman", "align_spearman", "grasp_auc")
"""The within-phase ranks averaged into ``rank_score``."""

COLUMNS: tuple[tuple[str, str], ...] = (
    ("approach ρ", "approach_spearman"), ("align ρ", "align_spearman"), ("grasp AUC", "grasp_auc"),
    ("right prompt", "right_prompt_accuracy"), ("approach spread", "approach_spread"),
    ("align spread", "align_spread"), ("grasp spread", "grasp_spread"), ("return AUC", "auc_return"),
    ("mean-reward AUC", "auc_mean_reward"), ("range / single", "range_ratio_over_single"),
)
"""Table columns: header and key in a set's metrics."""


def _nanmean(values: Sequence[float]) -> float:
    v = [x for x in values if x == x]
    return float(np.mean(v)) if v else float("nan")


def _group_ranks(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Average ranks (1-based, ties share their mean rank) of ``values`` within each group."""
    order = np.lexsort((values, groups))
    g, v = groups[order], values[order]
    n = len(v)
    starts = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    first = np.repeat(starts, np.diff(np.r_[starts, n]))
    pos = np.arange(n) - first + 1.0
    run = np.r_[0, np.cumsum((g[1:] != g[:-1]) | (v[1:] != v[:-1]))]
    mean_pos = np.bincount(run, weights=pos) / np.bincount(run)
    ranks = np.empty(n)
    ranks[order] = mean_pos[run]
    return ranks


def episode_flatness(x: np.ndarray, rows: Any) -> dict[str, float]:
    """Medians over episodes of the mean |step change|, the range and the Spearman with minus
    the distance of ``x`` along each episode: pipeline.analyses.query.flatness_query's numbers
    (tested equal), vectorised over episodes."""
    ep = rows.episode
    ids, group = np.unique(ep, return_inverse=True)
    order = np.lexsort((rows.step, group))
    g, xs = group[order], np.asarray(x, dtype=np.float64)[order]
    same = g[1:] == g[:-1]
    count = np.bincount(g, minlength=len(ids))
    steps = np.bincount(g[1:][same], weights=np.abs(np.diff(xs))[same], minlength=len(ids))
    with np.errstate(invalid="ignore", divide="ignore"):
        step_change = np.where(count > 1, steps / np.maximum(count - 1, 1), np.nan)
    hi = np.full(len(ids), -np.inf)
    lo = np.full(len(ids), np.inf)
    np.maximum.at(hi, group, x)
    np.minimum.at(lo, group, x)
    rng = hi - lo
    ra, rb = _group_ranks(np.asarray(x, dtype=np.float64), group), _group_ranks(-rows.distance, group)
    dhi = np.full(len(ids), -np.inf)
    dlo = np.full(len(ids), np.inf)
    np.maximum.at(dhi, group, rows.distance)
    np.minimum.at(dlo, group, rows.distance)
    ma, mb = (np.bincount(group, weights=r) / count for r in (ra, rb))
    ca, cb = ra - ma[group], rb - mb[group]
    cov = np.bincount(group, weights=ca * cb)
    va, vb = np.bincount(group, weights=ca * ca), np.bincount(group, weights=cb * cb)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = cov / np.sqrt(va * vb)
    rho[(count < 3) | (rng == 0) | (dhi - dlo == 0)] = np.nan
    med = lambda a: float(np.median(a[a == a])) if (a == a).any() else float("nan")  # noqa: E731
    return {"mean_abs_step_change": med(step_change), "range": med(rng), "spearman_neg_distance": med(rho)}


def set_metrics(mean: np.ndarray, single: np.ndarray, rows: Any, reward_rows: np.ndarray,
                episodes: list[np.ndarray], success: np.ndarray, shaping: Any, bounds: str) -> dict[str, Any]:
    """Metrics of one set from its view-mean scores ``mean`` [N, K] and its single goal's [N]."""
    from pipeline.stores.store_rows import active
    from rmtl.reward.quality_stats import roc_auc, step_variation
    from rmtl.reward.replay import shaped_rewards
    from rmtl.tasks import get_task

    k = mean.shape[1]
    scores = mean if k > 1 else np.repeat(mean, 3, axis=1)  # one goal: its score in every phase
    m = get_task().phase_metrics(scores, rows.state)  # the study reads pick-and-lift stores
    if k == 1:
        m["right_prompt_accuracy"] = float("nan")
    act = mean[:, 0] if k == 1 else active(mean, rows.phase)
    m["step_variation"] = step_variation(act, rows.episode, rows.step, rows.phase)
    own, ref = episode_flatness(act, rows), episode_flatness(single, rows)
    m["episode_range"], m["single_episode_range"] = own["range"], ref["range"]
    m["episode_step_change"] = own["mean_abs_step_change"]
    ratio = own["range"] / ref["range"] if ref["range"] > 0 else float("nan")
    m["range_ratio_over_single"] = 1.0 if k == 1 else ratio
    m["episode_spearman_neg_distance"] = own["spearman_neg_distance"]
    shaped = shaped_rewards(act[reward_rows].astype(np.float64), rows.phase[reward_rows], episodes, shaping, k, bounds)
    ret = np.array([shaped[idx].sum() for idx in episodes])
    per_step = ret / np.maximum([len(idx) for idx in episodes], 1)
    m["auc_return"] = roc_auc(ret[success], ret[~success])
    m["auc_mean_reward"] = roc_auc(per_step[success], per_step[~success])
    m["rank_score"] = _nanmean([m[key] for key in RANK_KEYS])
    return m


def prompt_study(store: Any, prompt_sets: str | os.PathLike[str] | Sequence[PromptSet], model: str | None = None,
                 alpha: float = DEFAULT_ALPHA, out_dir: str | os.PathLike[str] | None = None, bounds: str = "adapted",
                 show: bool = True, plots: bool = True) -> dict[str, Any]:
    """Rank prompt sets (a directory or file of YAML sets, or loaded sets) on one store (module
    docstring); returns the JSON-able result with ``sets`` best first, ``seconds`` and ``files``."""
    from pipeline.stores.analysis_dataset import default_out_dir
    from pipeline.stores.store_models import resolve_model_id
    from pipeline.stores.store_rows import iter_embeddings, load_rows, open_store
    from pipeline.stores.stored_text import prompt_set_text
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.reward.prompt_sets import load_prompt_sets
    from rmtl.reward.shaping import ShapingConfig

    t0 = time.perf_counter()
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha must be in [0, 1], got {alpha}")
    sets = load_prompt_sets(prompt_sets) if isinstance(prompt_sets, (str, os.PathLike)) else list(prompt_sets)
    if not sets:
        raise ConfigError("give at least one prompt set to study")
    with open_store(store) as st:
        model_id = resolve_model_id(st, model)
        rows = load_rows(st, model_id)
        success_rows = st.read(fields=["success"])["success"][rows.rows]
        sets = [store_prompts(st, s) for s in sets]  # each set for the store's task (in its order)
        texts = [(prompt_set_text(st, model_id, s), prompt_set_text(st, model_id, s, single_prompt=True)) for s in sets]
        # A set and its single goal share a baseline, so the single goal's score is one more
        # goal column (for a single-prompt set the same goal twice).
        goals = [np.concatenate([t.goals, one.goals]) for t, one in texts]
        means = [np.empty((len(rows), g.shape[0]), dtype=np.float32) for g in goals]
        t_read = time.perf_counter()
        for pos, emb in iter_embeddings(st, model_id, rows.rows):
            for j, (t, _) in enumerate(texts):
                means[j][pos] = goal_baseline_scores(emb, goals[j], t.baseline, alpha).mean(axis=1)
        t_score = time.perf_counter()
        out = Path(out_dir) if out_dir is not None else default_out_dir(st) / "prompt_study"
        source = {"store": st.path, "store_uuid": st.uuid, "store_rows": st.num_rows, "model_id": model_id,
                  "views": list(st.views)}
    keep = rows.step >= 1  # reward steps: the states env steps ended in
    reward_rows = np.flatnonzero(keep)
    ep = rows.episode[reward_rows]
    ids = np.unique(ep)
    episodes = [np.flatnonzero(ep == e)[np.argsort(rows.step[reward_rows][ep == e], kind="stable")] for e in ids]
    success = np.array([bool(success_rows[rows.episode == e].any()) for e in ids])
    shaping = ShapingConfig()
    results = []
    for s, m in zip(sets, means):
        k = s.num_goals
        metrics = set_metrics(m[:, :k], m[:, k], rows, reward_rows, episodes, success, shaping, bounds)
        results.append({"name": s.name, "id": s.id, "single_prompt": s.single_prompt, "source": s.source,
                        "goals": k, "metrics": metrics, "prompt_set": s.to_dict()})
    results.sort(key=lambda r: (-np.nan_to_num(r["metrics"]["rank_score"], nan=-9.0), r["name"]))
    for i, r in enumerate(results, 1):
        r["rank"] = i
    result: dict[str, Any] = {
        **source, "alpha": float(alpha), "bounds": bounds, "rows": len(rows), "episodes": int(len(ids)),
        "successes": int(success.sum()), "reward_steps": int(len(reward_rows)),
        "references": references(rows, reward_rows, episodes, success), "sets": results,
        "seconds": {"read_and_score": round(t_score - t_read, 3), "total": None},
    }
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": str(out / "prompt_study.json"), "csv": str(out / "prompt_study.csv")}
    write_csv(out / "prompt_study.csv", results)
    if plots:
        files["png"] = str(plot_study(out / "prompt_study.png", result))
    result["files"] = files
    result["seconds"]["total"] = round(time.perf_counter() - t0, 3)
    (out / "prompt_study.json").write_text(json.dumps(portable_values(json_safe(result)), indent=1, default=str))
    if show:
        print_table(result)
    return result


def references(rows: Any, reward_rows: np.ndarray, episodes: list[np.ndarray], success: np.ndarray) -> dict[str, Any]:
    """The AUCs that put the sets' in scale (as pipeline.analyses.return_ranking): episode length alone
    (successes end early and every shaped reward is <= 0) and the dense reference reward."""
    from rmtl.reward.quality_stats import roc_auc
    from rmtl.tasks import get_task

    length = np.array([len(idx) for idx in episodes], dtype=np.float64)
    dense = get_task().dense_reward(rows.state[reward_rows]).astype(np.float64)
    ret = np.array([dense[idx].sum() for idx in episodes])
    auc = lambda x: roc_auc(x[success], x[~success])  # noqa: E731
    return {"length_only": {"auc_return": auc(-length)},
            "dense_reference": {"auc_return": auc(ret), "auc_mean_reward": auc(ret / np.maximum(length, 1))}}


def write_csv(path: Path, results: list[dict[str, Any]]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rank", "name", "id", "goals", "rank_score", *(key for _, key in COLUMNS)])
        for r in results:
            m = r["metrics"]
            w.writerow([r["rank"], r["name"], r["id"], r["goals"], _cell(m["rank_score"]),
                        *(_cell(m[key]) for _, key in COLUMNS)])
    return path


def _cell(x: Any) -> str:
    return "" if x is None or x != x else f"{x:.4f}"


def _fmt(x: Any) -> str:
    return "n/a" if x is None or x != x else f"{x:.3f}"


def print_table(result: dict[str, Any]) -> None:
    """The ranking as a rich table, best set first."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{result['store']}: {len(result['sets'])} prompt sets, {result['model_id']}, alpha "
                    f"{result['alpha']}, {result['rows']} rows, {result['successes']}/{result['episodes']} "
                    f"episodes succeeded")
    for col in ("#", "set", "id", "K", "rank score", *(c for c, _ in COLUMNS)):
        t.add_column(col, justify="left" if col in ("set", "id") else "right")
    for r in result["sets"]:
        m = r["metrics"]
        t.add_row(str(r["rank"]), r["name"], r["id"], str(r["goals"]), _fmt(m["rank_score"]),
                  *(_fmt(m[key]) for _, key in COLUMNS))
    c = Console(width=None if sys.stdout.isatty() else 200)  # a log or pipe gets every column
    c.print(t)
    ref = result["references"]
    c.print(f"references: return AUC of episode length alone {_fmt(ref['length_only']['auc_return'])}; dense "
            f"reference reward: return AUC {_fmt(ref['dense_reference']['auc_return'])}, mean-reward AUC "
            f"{_fmt(ref['dense_reference']['auc_mean_reward'])}")
    c.print(f"scored in {result['seconds']['read_and_score']} s, {result['seconds']['total']} s in all; "
            "wrote " + ", ".join(result.get("files", {}).values()))


def plot_study(path: Path, result: dict[str, Any]) -> Path:
    """Four panels, one bar per set (best at the top): within-phase ranks, right-prompt
    accuracy, return-ranking AUCs, episode range over the single prompt's."""
    from pipeline.analyses.plots import figure

    sets = result["sets"]
    names = [f"{r['rank']}. {r['name']}" for r in sets]
    y = np.arange(len(sets))[::-1]
    val = lambda key: np.array([np.nan_to_num(r["metrics"][key], nan=0.0) for r in sets], dtype=float)  # noqa: E731
    fig, axes = figure(15, 1.2 + 0.32 * len(sets), 1, 4, sharey=True)
    ax = axes[0, 0]
    for i, (key, colour) in enumerate(zip(RANK_KEYS, ("#1f77b4", "#ff7f0e", "#2ca02c"))):
        ax.barh(y + (i - 1) * 0.27, val(key), 0.27, color=colour, label=key.replace("_", " "))
    ax.set_yticks(y, names, fontsize=8)
    ax.set_xlim(-1, 1)
    ax.axvline(0, color="k", lw=0.5)
    ax.set_title("within-phase ranks")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.04), ncol=3)
    ax = axes[0, 1]
    ax.barh(y, val("right_prompt_accuracy"), color="#9467bd")
    ax.set_xlim(0, 1)
    ax.set_title("right-prompt accuracy")
    ax = axes[0, 2]
    ax.barh(y + 0.2, val("auc_return"), 0.4, color="#8c564b", label="return")
    ax.barh(y - 0.2, val("auc_mean_reward"), 0.4, color="#e377c2", label="mean reward")
    ax.axvline(0.5, color="k", lw=0.5)
    ax.set_xlim(0, 1)
    ax.set_title("success vs failure AUC")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.04), ncol=2)
    ax = axes[0, 3]
    ax.barh(y, val("range_ratio_over_single"), color="#7f7f7f")
    ax.axvline(1.0, color="k", lw=0.5)
    ax.set_title("episode range / single prompt's")
    fig.savefig(path, dpi=110)
    return path


class PromptStudyConfig(StoreQuestion):
    """``rmtl prompt-study``: rank prompt sets on one store."""

    prompts: str
    """Directory of prompt-set YAML files (or one file)."""
    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""
    bounds: str = "adapted"
    """Shaping bounds of the return ranking: 'adapted' or 'running'."""


def run(cfg: PromptStudyConfig) -> dict[str, Any]:
    """The prompt study a config describes (table printed, JSON, CSV and PNG written)."""
    from rmtl.reward.prompt_sets import load_prompt_sets

    return prompt_study(cfg.store, load_prompt_sets(cfg.prompts), cfg.model, alpha=cfg.alpha, out_dir=cfg.out,
                        bounds=cfg.bounds)

"""The per-view analysis (paper Fig. 3/8): each view's active score against the multi-view
mean, its step-to-step variation and phase switches; writes ``per_view.zarr`` and its two PNGs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from pipeline.stores.analysis_dataset import default_out_dir, write_dataset
from pipeline.analyses.plots import plot_view_episodes, plot_view_frame
from pipeline.stores.store_rows import StoreRows, active, load_rows, open_store, per_view_scores, source_attrs, step_deltas
from pipeline.stores.questions import LocatedQuestion, prompt_set_of
from pipeline.stores.store_models import resolve_model_id
from pipeline.stores.stored_text import prompts_record, text_embeddings
from rmtl.errors import ConfigError
from rmtl.reward.prompt_sets import PromptSet
from rmtl.reward.prompts import PromptConfig
from rmtl.reward.projection import DEFAULT_ALPHA


class PerViewConfig(LocatedQuestion):
    """The per-view analysis (paper Fig. 3/8): ``rmtl per-view-analysis``, the ``per-view-analysis``
    flow and :func:`run`."""

    alpha: float = Field(DEFAULT_ALPHA, ge=0, le=1)
    """Projection alpha."""
    episodes: tuple[int, ...] | None = None
    """Episodes to plot (default: the first two)."""
    row: int | None = None
    """Store row for the one-frame plot (default: the row of median view disagreement)."""
    plots: bool = True
    """Write the two PNGs (off: the dataset only)."""


@dataclass(frozen=True)
class PerViewResult:
    dataset: str
    plots: dict[str, str]
    summary: dict[str, Any]


def phase_switches(act_mean: np.ndarray, rows: StoreRows) -> dict[str, np.ndarray]:
    """Consecutive steps of an episode whose rule phase changes: index (into rows) of the
    step after the switch, from/to phase and the jump of the active view-mean score."""
    order = np.lexsort((rows.step, rows.episode))
    e, s, p = rows.episode[order], rows.step[order], rows.phase[order]
    nxt = (e[1:] == e[:-1]) & (s[1:] == s[:-1] + 1) & (p[1:] != p[:-1])
    after = order[1:][nxt]
    before = order[:-1][nxt]
    return {"index": after, "from": rows.phase[before], "to": rows.phase[after],
            "jump": (act_mean[after] - act_mean[before]).astype(np.float32)}


def per_view_analysis(
    store: Any,
    model_id: str | None = None,
    alpha: float = DEFAULT_ALPHA,
    prompts: PromptConfig | PromptSet | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    episodes: Sequence[int] | None = None,
    row: int | None = None,
    plots: bool = True,
) -> PerViewResult:
    """Per-view vs view-mean active scores per step, their smoothness, view disagreement
    and the jump at phase switches; writes ``per_view.zarr`` plus the Fig. 3/8 PNGs.

    Dataset arrays: ``row``/``episode``/``step``/``phase``/``distance``/``lift`` [N],
    ``per_view`` [N, V] (active score per view), ``mean`` [N] (their mean = the training
    signal), ``disagreement`` [N] (std over views), ``switch_index``/``switch_from``/
    ``switch_to``/``switch_jump`` [S] (phase switches, index into the N rows).
    ``episodes``: the two episodes of Fig. 8 (default the first two); ``row``: the store
    row of Fig. 3 (default: the row of median view disagreement).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha must be in [0, 1], got {alpha}")
    with open_store(store) as st:
        model_id = resolve_model_id(st, model_id)
        rows = load_rows(st, model_id)
        text = text_embeddings(st, model_id, prompts)
        record = prompts_record(st, prompts)
        pv = per_view_scores(st, model_id, text, [alpha], rows.rows)[0]  # [N, V, K]
        views = list(st.views)
        out = Path(out_dir) if out_dir is not None else default_out_dir(st)
        src = source_attrs(st, model_id)
        per_view = active(pv, rows.phase, row_axis=0)  # [N, V]
        mean = per_view.mean(axis=1)
        disagreement = per_view.std(axis=1)
        if row is None:
            order = np.argsort(disagreement, kind="stable")
            frame_i = int(order[len(order) // 2])
        else:
            hits = np.flatnonzero(rows.rows == row)
            if not len(hits):
                raise ConfigError(f"row {row} is not an analysed row of {st.path} (rows with embeddings, episode >= 0)")
            frame_i = int(hits[0])
        thumbs = st.read(int(rows.rows[frame_i]), fields=["frames"])["frames"] if st.has_frames else None

    var_view = {v: float(step_deltas(per_view[:, i], rows).mean()) if len(rows) > 1 else float("nan")
                for i, v in enumerate(views)}
    deltas_mean = step_deltas(mean, rows)
    var_mean = float(deltas_mean.mean()) if len(deltas_mean) else float("nan")
    sw = phase_switches(mean, rows)
    by_kind = {}
    for a, b in sorted(set(zip(sw["from"].tolist(), sw["to"].tolist()))):
        m = (sw["from"] == a) & (sw["to"] == b)
        by_kind[f"{rows.phase_names[a]}->{rows.phase_names[b]}"] = {"count": int(m.sum()), "mean_jump": float(sw["jump"][m].mean())}
    summary = {
        "alpha": float(alpha), "rows": len(rows), "episodes": len(rows.episode_ids()),
        "step_variation": {"mean": var_mean, **var_view},
        "mean_smoother_than_views": {v: bool(var_mean < x) for v, x in var_view.items()},
        "disagreement": {"mean": float(disagreement.mean()), "median": float(np.median(disagreement)),
                         "p95": float(np.percentile(disagreement, 95))},
        "phase_switches": {"count": int(len(sw["jump"])),
                           "mean_abs_jump": float(np.abs(sw["jump"]).mean()) if len(sw["jump"]) else float("nan"),
                           "jump_over_step_variation": (float(np.abs(sw["jump"]).mean() / var_mean)
                                                        if len(sw["jump"]) and var_mean > 0 else float("nan")),
                           "by_kind": by_kind},
        "frame_row": int(rows.rows[frame_i]),
    }
    out.mkdir(parents=True, exist_ok=True)
    ds = write_dataset(out / "per_view.zarr", {
        "row": rows.rows, "episode": rows.episode, "step": rows.step, "phase": rows.phase.astype(np.int8),
        "distance": rows.distance.astype(np.float32), "lift": rows.lift.astype(np.float32),
        "per_view": per_view.astype(np.float32), "mean": mean.astype(np.float32),
        "disagreement": disagreement.astype(np.float32), "switch_index": sw["index"].astype(np.int64),
        "switch_from": sw["from"].astype(np.int8), "switch_to": sw["to"].astype(np.int8), "switch_jump": sw["jump"],
    }, {**src, "analysis": "per_view", "alpha": float(alpha), "phases": list(rows.phase_names),
        "prompts": record, "summary": summary})
    pngs: dict[str, str] = {}
    if plots:
        pngs["frame"] = str(plot_view_frame(out / "per_view_frame.png", views, per_view[frame_i], mean[frame_i],
                                            int(rows.rows[frame_i]), rows.phase_names[int(rows.phase[frame_i])], thumbs))
        eps = list(episodes) if episodes is not None else rows.episode_ids()[:2]
        missing = [e for e in eps if e not in rows.episode_ids()]
        if missing:
            raise ConfigError(f"episodes {missing} are not among the analysed episodes")
        pngs["episodes"] = str(plot_view_episodes(out / "per_view_episodes.png", views, per_view, mean, rows, eps))
    return PerViewResult(str(ds), pngs, summary)


def run(cfg: PerViewConfig) -> PerViewResult:
    """The per-view analysis a config describes."""
    return per_view_analysis(cfg.store_path(), cfg.model, cfg.alpha, prompts=prompt_set_of(cfg.prompts),
                             out_dir=cfg.out, episodes=cfg.episodes or None, row=cfg.row, plots=cfg.plots)

"""The alpha sweep (paper Fig. 10/11): the active phase's goal-baseline score for every alpha,
from stored embeddings only; writes ``alpha_sweep.zarr`` and its two PNGs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from pipeline.stores.analysis_dataset import default_out_dir, write_dataset
from pipeline.analyses.plots import plot_alpha_episode, plot_alpha_state
from pipeline.stores.store_rows import StoreRows, active, load_rows, open_store, per_view_scores, source_attrs
from pipeline.stores.questions import LocatedQuestion, prompt_set_of
from pipeline.stores.store_models import resolve_model_id
from pipeline.stores.stored_text import prompts_record, text_embeddings
from rmtl.errors import ConfigError
from rmtl.reward.prompt_sets import PromptSet
from rmtl.reward.prompts import PromptConfig


DEFAULT_ALPHAS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(11))
"""alpha = 0, 0.1, ..., 1 (paper Fig. 10/11)."""


class AlphaSweepConfig(LocatedQuestion):
    """The alpha sweep (paper Fig. 10/11): ``rmtl alpha-sweep``, the ``alpha-sweep`` flow and :func:`run`."""

    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    """Alphas to score."""
    episode: int | None = None
    """Episode for the per-step plot (default: most phases visited, then longest)."""
    bins: int = Field(20, ge=1)
    """Bins of distance and lift in the per-state plot."""
    plots: bool = True
    """Write the two PNGs (off: the dataset only)."""


@dataclass(frozen=True)
class AlphaSweepResult:
    dataset: str
    plots: dict[str, str]
    alphas: tuple[float, ...]
    episode: int
    summary: dict[str, Any]


def pick_episode(rows: StoreRows) -> int:
    """The episode that visits the most rule phases, then the longest (ties: lowest id)."""
    best, key = None, None
    for e in rows.episode_ids():
        idx = rows.episode_index(e)
        k = (len(np.unique(rows.phase[idx])), len(idx), -e)
        if key is None or k > key:
            best, key = e, k
    return int(best)


def alpha_sweep(
    store: Any,
    model_id: str | None = None,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    prompts: PromptConfig | PromptSet | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    episode: int | None = None,
    bins: int = 20,
    plots: bool = True,
) -> AlphaSweepResult:
    """Score every analysed row for every alpha from stored embeddings (no rendering) and
    write ``alpha_sweep.zarr`` plus the Fig. 10/11 PNGs into ``out_dir``. ``model_id``:
    a stored model id or a model spec; None when the store holds one model.

    Dataset arrays: ``alpha`` [A], ``row``/``episode``/``step``/``phase`` [N],
    ``distance``/``lift`` [N] (m), ``scores`` [N, A, K] (view-mean score of every
    micro-task), ``active`` [N, A] (view-mean score of the row's rule phase).
    ``episode`` picks the Fig. 10 episode (default: most phases visited, then longest).
    """
    alphas = tuple(float(a) for a in alphas)
    if not alphas or any(not 0.0 <= a <= 1.0 for a in alphas):
        raise ConfigError(f"alphas must be a non-empty list of values in [0, 1], got {list(alphas)}")
    with open_store(store) as st:
        model_id = resolve_model_id(st, model_id)
        rows = load_rows(st, model_id)
        text = text_embeddings(st, model_id, prompts)
        record = prompts_record(st, prompts)
        pv = per_view_scores(st, model_id, text, alphas, rows.rows)  # [A, N, V, K]
        out = Path(out_dir) if out_dir is not None else default_out_dir(st)
        src = source_attrs(st, model_id)
    mean = pv.mean(axis=2)  # [A, N, K]
    act = active(mean, rows.phase)  # [A, N]
    if episode is None:
        episode = pick_episode(rows)
    elif episode not in rows.episode_ids():
        raise ConfigError(f"episode {episode} is not among the analysed episodes {rows.episode_ids()[:10]}...")
    ranges = {f"{a:.1f}": float(np.percentile(act[i], 95) - np.percentile(act[i], 5)) for i, a in enumerate(alphas)}
    ep_idx = rows.episode_index(episode)
    ep_var = {f"{a:.1f}": float(np.abs(np.diff(act[i, ep_idx])).mean()) if len(ep_idx) > 1 else float("nan")
              for i, a in enumerate(alphas)}
    summary = {"rows": len(rows), "episodes": len(rows.episode_ids()), "episode": int(episode),
               "active_p5_p95": ranges, "episode_mean_abs_step_change": ep_var}
    out.mkdir(parents=True, exist_ok=True)
    ds = write_dataset(out / "alpha_sweep.zarr", {
        "alpha": np.asarray(alphas, np.float32), "row": rows.rows, "episode": rows.episode, "step": rows.step,
        "phase": rows.phase.astype(np.int8), "distance": rows.distance.astype(np.float32),
        "lift": rows.lift.astype(np.float32), "scores": np.transpose(mean, (1, 0, 2)).astype(np.float32),
        "active": act.T.astype(np.float32),
    }, {**src, "analysis": "alpha_sweep", "alphas": list(alphas), "phases": list(rows.phase_names),
        "prompts": record, "summary": summary})
    pngs: dict[str, str] = {}
    if plots:
        pngs["episode"] = str(plot_alpha_episode(out / "alpha_sweep_episode.png", alphas, act[:, ep_idx],
                                                 rows.step[ep_idx], rows.phase[ep_idx], episode, rows.phase_names))
        pngs["state"] = str(plot_alpha_state(out / "alpha_sweep_state.png", alphas, act, rows.distance, rows.lift, bins))
    return AlphaSweepResult(str(ds), pngs, alphas, int(episode), summary)


def run(cfg: AlphaSweepConfig) -> AlphaSweepResult:
    """The alpha sweep a config describes."""
    return alpha_sweep(cfg.store_path(), cfg.model, cfg.alphas, prompts=prompt_set_of(cfg.prompts), out_dir=cfg.out,
                       episode=cfg.episode, bins=cfg.bins, plots=cfg.plots)

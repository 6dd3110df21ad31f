"""Offline return ranking: does a reward variant's shaped episode return rank successful
episodes above failed ones (ROC AUC)? From stored embeddings only: no rendering, no model.

A variant is a Stage-1 variant name; its RewardConfig gives the prompts (micro-task or
single), views, alpha and shaping. For each one, the stored per-view embeddings of every
episode's reward steps are scored with the store's text embeddings, and the real
:class:`~rmtl.reward.shaping.RewardShaper` runs over the active scores in step order:

- reward steps are the rows with step >= 1 (the states env steps ended in); the reset
  row (step 0) earns no reward in training either;
- the active phase is the distance rule of the row's state; a single-prompt reward has
  one phase and ignores it (``Scores.active``, ``RewardShaper``);
- the rewards are replayed by :func:`rmtl.reward.replay.shaped_rewards`: one shaper env over
  the episodes in episode-id order, ``bounds`` ``adapted`` (default) or ``running`` as there;
- the shaped return is the sum of the shaped rewards, without the env's +1 success bonus
  (which would separate the classes by itself).

Successful episodes terminate early and every shaped reward lies in [-1, 0], so a shorter
episode has the higher return whatever the reward says. Two references put the AUCs in
scale: ``length_only`` (return = -length: what the episode length alone gives) and
``dense_reference`` (the hand-written dense reward of the states); the mean reward per step
(length-free) is ranked too.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from pipeline.stores.questions import StoreQuestion
from pipeline.stores.store_models import store_task
from rmtl.errors import ConfigError
from rmtl.provenance import json_safe, portable_values
from rmtl.reward.replay import BOUNDS, shaped_rewards
from rmtl.train.variants import variant_names

DEFAULT_VARIANTS: tuple[str, ...] = variant_names(analysis="return_ranking")
"""The variants ``rmtl/train/variants.yaml`` marks for return ranking."""

REFERENCES = ("length_only", "dense_reference")


@dataclass
class RewardSteps:
    """A store's reward steps (rows with step >= 1, module docstring) and their episodes."""

    rows: np.ndarray  # [N] store row ids
    state: np.ndarray  # [N, S]
    phase: np.ndarray  # [N] rule phase
    episode: np.ndarray  # [N]
    step: np.ndarray  # [N]
    distance: np.ndarray  # [N] gripper-cube distance (m)
    lift: np.ndarray  # [N] cube lift (m)
    ids: np.ndarray  # [E] episode ids, sorted
    episodes: list[np.ndarray]  # per episode: indices into these steps, in step order
    success: np.ndarray  # [E] any row of the episode (the reset row included) is a success


def reward_steps(store: Any, model_id: str, purpose: str = "rank") -> RewardSteps:
    """The reward steps of an open store with embeddings of ``model_id``."""
    from pipeline.stores.store_rows import load_rows

    labels = load_rows(store, model_id)
    keep = labels.step >= 1
    if not keep.any():
        raise ConfigError(f"{store.path} has no reward steps (rows with step >= 1) to {purpose}")
    episode, step = labels.episode[keep], labels.step[keep]
    ids = np.unique(episode)
    success_rows = store.read(fields=["success"])["success"][labels.rows]
    return RewardSteps(
        rows=labels.rows[keep], state=labels.state[keep], phase=labels.phase[keep], episode=episode, step=step,
        distance=labels.distance[keep], lift=labels.lift[keep], ids=ids,
        episodes=[np.flatnonzero(episode == e)[np.argsort(step[episode == e], kind="stable")] for e in ids],
        success=np.array([bool(success_rows[labels.episode == e].any()) for e in ids]),
    )


def variant_scores(store: Any, model_id: str, rows: np.ndarray, phases: np.ndarray, variant: str,
                   purpose: str = "rank") -> tuple[np.ndarray, Any, int]:
    """(active-prompt scores [N] of store ``rows``, the variant's Stage1Config, its number
    of phases K) under a Stage-1 variant's reward config."""
    from pipeline.stores.store_rows import per_view_scores
    from pipeline.stores.stored_text import text_embeddings
    from rmtl.reward.scorer import Scores
    from rmtl.train.config import stage1_config

    cfg = stage1_config(variant)
    if cfg.reward.kind != "vlm":
        raise ConfigError(f"variant {variant!r} has no VLM reward to {purpose} (the dense reward is a reference row)")
    reward = store_task(store).reward_config(cfg.reward)  # prompts and views of the store's task
    missing = [v for v in reward.active_views if v not in store.views]
    if missing:
        raise ConfigError(f"variant {variant!r} scores views {list(reward.active_views)}, but {store.path} "
                          f"has no {missing}; render the store with these views")
    text = text_embeddings(store, model_id, reward.prompts, reward.single_prompt)
    per_view = per_view_scores(store, model_id, text, [reward.alpha], rows, views=reward.active_views)[0]
    active = Scores(per_view, per_view.mean(axis=1)).active(phases)
    k = len(reward.prompts.goal_names) if reward.single_prompt_band else int(text.goals.shape[0])
    return active.astype(np.float64), cfg, k


def variant_rewards(store: Any, model_id: str, rows: np.ndarray, phases: np.ndarray,
                    episodes: Sequence[np.ndarray], variant: str, bounds: str = "adapted") -> np.ndarray:
    """Shaped rewards [N] of store ``rows`` under a Stage-1 variant's reward config."""
    active, cfg, num_phases = variant_scores(store, model_id, rows, phases, variant)
    return shaped_rewards(active, phases, episodes, cfg.reward.shaping, num_phases, bounds)


def _auc(values: np.ndarray, success: np.ndarray) -> float:
    from rmtl.reward.quality_stats import roc_auc

    return roc_auc(values[success], values[~success])


def _row(name: str, ret: np.ndarray, length: np.ndarray, success: np.ndarray, **extra: Any) -> dict[str, Any]:
    mean = ret / np.maximum(length, 1)
    nan = float("nan")
    return {
        "variant": name, **extra,
        "auc_return": _auc(ret, success), "auc_mean_reward": _auc(mean, success),
        "mean_return_success": float(ret[success].mean()) if success.any() else nan,
        "mean_return_failure": float(ret[~success].mean()) if (~success).any() else nan,
    }


def return_ranking(store: Any, model: str | None = None, variants: Sequence[str] = DEFAULT_VARIANTS,
                   out_dir: str | os.PathLike[str] | None = None, bounds: str = "adapted",
                   show: bool = True) -> dict[str, Any]:
    """ROC AUC of successful vs failed episodes for each variant's shaped return (module
    docstring), with the references. Writes ``return_ranking.json`` and
    ``return_ranking_episodes.csv`` (per-episode returns) into ``out_dir`` (default
    ``<store>.analysis/return_ranking``); prints a table when ``show``."""
    from pipeline.stores.analysis_dataset import default_out_dir
    from pipeline.stores.store_models import resolve_model_id
    from pipeline.stores.store_rows import open_store
    from rmtl.tasks import get_task

    if not variants:
        raise ConfigError("give at least one reward variant to rank")
    if bounds not in BOUNDS:
        raise ConfigError(f"bounds must be one of {', '.join(BOUNDS)}, got {bounds!r}")
    with open_store(store) as st:
        model_id = resolve_model_id(st, model)
        steps = reward_steps(st, model_id)
        rows, state, ids, episodes, success = steps.rows, steps.state, steps.ids, steps.episodes, steps.success
        length = np.array([len(idx) for idx in episodes])
        per_variant = {v: variant_rewards(st, model_id, rows, steps.phase, episodes, v, bounds) for v in variants}
        out = Path(out_dir) if out_dir is not None else default_out_dir(st) / "return_ranking"
        path = st.path
    dense = get_task().dense_reward(state).astype(np.float64)  # the ranking reads pick-and-lift stores
    returns = {v: np.array([r[idx].sum() for idx in episodes]) for v, r in per_variant.items()}
    table = [_row(v, returns[v], length, success, kind="vlm") for v in variants]
    table.append(_row("length_only", -length.astype(np.float64), length, success, kind="reference"))
    table.append(_row("dense_reference", np.array([dense[idx].sum() for idx in episodes]), length, success,
                      kind="reference"))
    result: dict[str, Any] = {
        "store": path, "model_id": model_id, "episodes": int(len(ids)), "successes": int(success.sum()),
        "reward_steps": int(len(rows)), "bounds": bounds, "variants": table,
    }
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "return_ranking_episodes.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["episode", "success", "length", *variants])
        for j, e in enumerate(ids):
            w.writerow([int(e), int(success[j]), int(length[j]), *(round(float(returns[v][j]), 5) for v in variants)])
    result["files"] = {"json": str(out / "return_ranking.json"), "episodes_csv": str(out / "return_ranking_episodes.csv")}
    # NaN (one class empty): null
    (out / "return_ranking.json").write_text(json.dumps(portable_values(json_safe(result)), indent=1))
    if show:
        print_table(result)
    return result


def print_table(result: dict[str, Any]) -> None:
    """The AUC table of :func:`return_ranking` (rich)."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{result['store']}: successful vs failed episodes ({result['successes']} of "
                    f"{result['episodes']} succeeded), {result['model_id']}, {result['bounds']} bounds")
    for col in ("variant", "ROC AUC of return", "ROC AUC of mean reward", "mean return success", "mean return failure"):
        t.add_column(col)
    f = lambda x: "n/a" if x is None or x != x else f"{x:.3f}"  # noqa: E731  (NaN: one class is empty)
    for r in result["variants"]:
        t.add_row(r["variant"] + (" (reference)" if r["kind"] == "reference" else ""), f(r["auc_return"]),
                  f(r["auc_mean_reward"]), f(r["mean_return_success"]), f(r["mean_return_failure"]))
    Console().print(t)


class ReturnRankingConfig(StoreQuestion):
    """``rmtl return-ranking``: ROC AUC of successful vs failed episodes per reward variant."""

    variants: tuple[str, ...] = DEFAULT_VARIANTS
    """Stage-1 variants whose shaped return to rank."""
    bounds: str = "adapted"
    """'adapted': bounds where long training leaves them; 'running': start at 0.45/0.70 like a fresh env."""


def run(cfg: ReturnRankingConfig) -> dict[str, Any]:
    """The return ranking a config describes (table printed, JSON and CSV written)."""
    return return_ranking(cfg.store, cfg.model, list(cfg.variants), out_dir=cfg.out, bounds=cfg.bounds)

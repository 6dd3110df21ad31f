"""A store's episodes as the exports read them (Minari, LeRobot): whole episodes in
episode-id order, each its reset row then one row per env step, with the rule phase, the
prompt set's active view-mean score and the shaped reward of every step.

With T env steps an episode has T + 1 store rows; the reward of step t (t = 1..T) belongs
to the row step t ended in. Live-cache rows (episode -1) are left out. Episodes must hold
their reset row, every step and an end (terminated or truncated), as stores rendered with
``render_reset`` do; anything else is one StoreError line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rmtl.errors import ConfigError, StoreError
from rmtl.reward.prompt_sets import PromptSet
from rmtl.reward.projection import DEFAULT_ALPHA

REWARDS = ("vlm", "dense")
"""What ``shaped`` holds: the prompt set's shaped VLM reward, or the task's dense reference."""
BOUNDS = "adapted"
"""Shaping bounds of the exported VLM reward (pipeline.analyses.return_ranking: held at p1/p99 of the
store's active scores per phase, so a reward does not depend on the order episodes are read)."""
FIELDS = ("state", "episode", "step", "phase_rule", "success", "difficulty", "action", "terminated", "truncated")


@dataclass(frozen=True)
class StoreEpisodes:
    """The episodes of one store, rows concatenated in ``order`` (episode by episode, step order)."""

    path: str
    ids: list[int]
    """Store episode ids, in export order."""
    order: np.ndarray
    """Store rows of every exported episode, concatenated."""
    pos: dict[int, np.ndarray]
    """Episode id -> its positions in ``order`` (reset row first)."""
    cols: dict[str, np.ndarray]
    """``FIELDS`` of every committed store row (index with ``order``)."""
    phase: np.ndarray
    """Rule phase of the state of each position of ``order``."""
    score: np.ndarray
    """Active view-mean score of the prompt set at each position (NaN without embeddings)."""
    shaped: np.ndarray
    """Reward of the step that ended at each position (0 on reset rows), without the env's +1."""
    env_reward: np.ndarray
    """The env's own reward of that step: +1 on the success step, else 0."""
    model_id: str | None
    seeds: dict[int, int | None]
    """Reset seed of each episode (None when the store does not record its rollout)."""
    reward: str
    """Which reward ``shaped`` is (``REWARDS``)."""


def reset_seeds(store: Any, episodes: list[int]) -> dict[int, int | None]:
    """Reset seed of each episode from the store's recorded rollout settings (None if unknown)."""
    from pipeline.jobs.rollout import RolloutConfig, plan_episode

    rollout = (store.info.get("provenance") or {}).get("rollout")
    if not rollout:
        return {e: None for e in episodes}
    cfg = RolloutConfig.model_construct(**{**RolloutConfig().model_dump(), **rollout})
    return {e: int(plan_episode(cfg, e).reset_seed) for e in episodes}


def active_scores(store: Any, model: str | None, pset: PromptSet, rows: np.ndarray, phase: np.ndarray,
                  alpha: float) -> tuple[np.ndarray, str | None]:
    """Active view-mean score of every row ([N], NaN without embeddings) and the model id used."""
    from pipeline.stores.store_models import resolve_model_id
    from pipeline.stores.store_rows import active, per_view_scores
    from pipeline.stores.stored_text import prompt_set_text

    if not store.model_ids():
        return np.full(len(rows), np.nan, dtype=np.float32), None
    model_id = resolve_model_id(store, model)
    n = store.embedded_rows(model_id)
    if len(rows) and rows.max() >= n:
        raise StoreError(f"{store.path} has embeddings of {model_id} for {n} of its rows; embed the rest first "
                         f"(rmtl embed --store {store.path})")
    text = prompt_set_text(store, model_id, pset)
    mean = per_view_scores(store, model_id, text, [alpha], rows)[0].mean(axis=1)  # [N, K]
    act = mean[:, 0] if mean.shape[1] == 1 else active(mean, phase)
    return act.astype(np.float32), model_id


def read_episodes(st: Any, what: str, pset: PromptSet, model: str | None = None, reward: str = "vlm",
                  alpha: float = DEFAULT_ALPHA) -> StoreEpisodes:
    """The episodes of the open store ``st`` with their rewards (module docstring); ``what``
    completes the error of a store without actions ("cannot <what>")."""
    from rmtl.reward.replay import shaped_rewards
    from rmtl.reward.shaping import ShapingConfig
    from rmtl.tasks import get_task

    task = get_task()  # the export reads pick-and-lift stores (the default task)

    if reward not in REWARDS:
        raise ConfigError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
    st.require_actions(what)
    cols = st.read(fields=list(FIELDS))
    keep = np.flatnonzero(cols["episode"] >= 0)
    order = keep[np.lexsort((cols["step"][keep], cols["episode"][keep]))]
    ids = [int(e) for e in np.unique(cols["episode"][order])]
    if not ids:
        raise StoreError(f"{st.path} has no episode rows to export")
    phase = task.phases(cols["state"][order])
    if reward == "vlm" and not st.model_ids():
        raise StoreError(f"{st.path} has no image embeddings for VLM rewards; embed it (rmtl embed --store "
                         f"{st.path}) or export the dense reference (--reward dense)")
    score, model_id = active_scores(st, model, pset, order, phase, alpha)
    pos = {e: np.flatnonzero(cols["episode"][order] == e) for e in ids}
    for e, p in pos.items():
        steps = cols["step"][order[p]]
        if steps[0] != 0 or np.any(np.diff(steps) != 1):
            raise StoreError(f"{st.path} episode {e} does not hold its reset row and every step (steps "
                             f"{steps[:3].tolist()}...); export needs stores rendered with render_reset")
        last = order[p[-1]]
        if not (cols["terminated"][last] or cols["truncated"][last]):
            raise StoreError(f"{st.path} episode {e} has no end (neither terminated nor truncated); it is incomplete")
    step_pos = [p[1:] for p in pos.values()]  # reward steps: every row but the reset row
    if reward == "vlm":
        flat = np.concatenate(step_pos)
        local = np.empty(len(order), dtype=np.int64)
        local[flat] = np.arange(len(flat))
        shaped = np.zeros(len(order))
        shaped[flat] = shaped_rewards(score[flat].astype(np.float64), phase[flat], [local[p] for p in step_pos],
                                      ShapingConfig(), pset.num_goals, BOUNDS)
    else:
        shaped = task.dense_reward(cols["state"][order]).astype(np.float64)
    return StoreEpisodes(str(st.path), ids, order, pos, cols, phase, score, shaped,
                         cols["terminated"][order].astype(np.float64), model_id, reset_seeds(st, ids), reward)

"""The rows an analysis reads from a dataset store: per-row labels (state, episode, step,
the task's phase measure, lift, rule phase) and per-view goal-baseline scores from stored embeddings.

Rows analysed: rows with committed embeddings of the model that belong to an episode
(``episode >= 0``); rows appended by the live cache path (``episode < 0``, see
rmtl.reward.cached_source) have no trajectory and are left out of per-step statistics.
The active phase of a row is the phase rule of the store's task on its state
(``Task.phases``; pick-and-lift: the distance rule, as rmtl.tasks.fetch_lift.quality and the
reward wrapper use). The task is the one the store records (pipeline.stores.store_models.store_task)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterator, Sequence

import numpy as np
import contextlib

from pipeline.stores.store_models import spec_of, store_task
from rmtl.errors import StoreError
from rmtl.reward.projection import goal_baseline_scores
from rmtl.reward.prompts import TextEmbeddings
from rmtl.tasks import DEFAULT_TASK


SCORE_BLOCK_ROWS = 4096
"""Rows of embeddings read and scored at a time (bounds memory for large stores and models)."""


@contextlib.contextmanager
def open_store(store: Any) -> Iterator[Any]:
    """A DatasetStore from a path (opened read-only, closed after) or an open store (left open)."""
    from storage.dataset import DatasetStore

    if isinstance(store, DatasetStore):
        yield store
        return
    s = DatasetStore.open(store, "r")
    try:
        yield s
    finally:
        s.close()


@dataclass
class StoreRows:
    """Per-row labels of the analysed rows of a store (see module docstring)."""

    rows: np.ndarray  # [N] store row ids
    state: np.ndarray  # [N, state_dim]
    episode: np.ndarray  # [N]
    step: np.ndarray  # [N]
    distance: np.ndarray  # [N] the task's phase measure (pick-and-lift: gripper-cube distance, m)
    lift: np.ndarray | None  # [N] cube height above rest (m); None for a task other than pick-and-lift
    phase: np.ndarray  # [N] rule phase (the index into phase_names)
    views: list[str] = field(default_factory=list)
    phase_names: tuple[str, ...] = ("approach", "align", "grasp")
    """The task's micro-tasks in phase order."""
    measure: str = "gripper-cube distance (m)"
    """What ``distance`` measures, in words (the task's phase rule's measure)."""

    def __len__(self) -> int:
        return len(self.rows)

    def episode_ids(self) -> list[int]:
        return [int(e) for e in np.unique(self.episode)]

    def episode_index(self, episode: int) -> np.ndarray:
        """Indices (into these rows, not store rows) of one episode in step order."""
        idx = np.flatnonzero(self.episode == episode)
        return idx[np.argsort(self.step[idx], kind="stable")]


def load_rows(store: Any, model_id: str, include_live: bool = False, any_task: bool = False) -> StoreRows:
    """Labels of the rows with committed embeddings of ``model_id`` (episode rows only
    unless ``include_live``), in store order. A store of a task other than pick-and-lift is
    refused in one line unless ``any_task`` (the analysis reads only what every task defines)."""
    task = store_task(store)
    if task.name != DEFAULT_TASK and not any_task:
        raise StoreError(f"{store.path} holds task {task.name}; this analysis reads pick-and-lift stores only "
                         f"(rmtl query reads any task's)")
    n = store.embedded_rows(model_id)
    if n == 0:
        raise StoreError(f"{store.path} has no embeddings of model '{model_id}' (models: {store.model_ids() or 'none'}); "
                         f"embed it first: rmtl embed --store {store.path} --model {spec_of(store, model_id)}")
    cols = store.read(slice(0, n), fields=["state", "episode", "step"])
    keep = np.ones(n, bool) if include_live else cols["episode"] >= 0
    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        raise StoreError(f"{store.path} has no episode rows with embeddings of '{model_id}' to analyse")
    state = cols["state"][rows]
    return StoreRows(
        rows=rows, state=state, episode=cols["episode"][rows], step=cols["step"][rows],
        distance=np.asarray(task.phase_measure(state), dtype=np.float64),
        lift=np.asarray(task.lift_height(state), dtype=np.float64) if task.lift_height is not None else None,
        phase=task.phases(state), views=list(store.views), phase_names=task.micro_tasks.names,
        measure=task.micro_tasks.measure,
    )


def iter_embeddings(store: Any, model_id: str, rows: np.ndarray, block: int = SCORE_BLOCK_ROWS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(positions into ``rows``, float32 embeddings [b, V, D]) in blocks of store rows."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return
    lo, hi = int(rows.min()), int(rows.max()) + 1
    for a in range(lo, hi, block):
        b = min(hi, a + block)
        pos = np.flatnonzero((rows >= a) & (rows < b))
        if len(pos) == 0:
            continue
        emb = store.embeddings(model_id, slice(a, b))  # contiguous read: whole chunks
        yield pos, emb[rows[pos] - a].astype(np.float32)


def per_view_scores(store: Any, model_id: str, text: TextEmbeddings, alphas: Sequence[float], rows: np.ndarray,
                    views: Sequence[str] | None = None) -> np.ndarray:
    """Goal-baseline scores float32 [A, N, V, K] of store ``rows`` for every alpha, from
    stored embeddings only (``views`` selects and orders the view axis; default all)."""
    store_views = list(store.views)
    vidx = None if views is None else [store_views.index(v) for v in views]
    nv = len(store_views) if vidx is None else len(vidx)
    out = np.empty((len(alphas), len(rows), nv, text.goals.shape[0]), dtype=np.float32)
    for pos, emb in iter_embeddings(store, model_id, rows):
        if vidx is not None:
            emb = emb[:, vidx]
        for i, a in enumerate(alphas):
            out[i, pos] = goal_baseline_scores(emb, text.goals, text.baseline, float(a))
    return out


def active(scores: np.ndarray, phase: np.ndarray, row_axis: int = -2) -> np.ndarray:
    """Score of each row's active phase: drop the last (phase) axis of ``scores`` by
    picking ``phase[n]`` for row n, rows being axis ``row_axis`` (e.g. [A, N, K] with
    row_axis=-2 -> [A, N]; [N, V, K] with row_axis=0 -> [N, V])."""
    if scores.shape[-1] == 1:  # one goal (single prompt): active in every phase
        return scores[..., 0]
    p = np.asarray(phase, dtype=np.int64)
    ax = row_axis % scores.ndim
    if ax == scores.ndim - 1 or scores.shape[ax] != len(p):
        raise ValueError(f"axis {row_axis} of scores {scores.shape} is not the {len(p)} rows")
    shape = [1] * scores.ndim
    shape[ax] = len(p)
    idx = np.broadcast_to(p.reshape(shape), (*scores.shape[:-1], 1))
    return np.take_along_axis(scores, idx, axis=-1)[..., 0]


def step_deltas(x: np.ndarray, rows: StoreRows, same_phase: bool = True) -> np.ndarray:
    """|x_t - x_{t-1}| over consecutive steps of an episode (within one rule phase)."""
    order = np.lexsort((rows.step, rows.episode))
    e, s, p = rows.episode[order], rows.step[order], rows.phase[order]
    ok = (e[1:] == e[:-1]) & (s[1:] == s[:-1] + 1)
    if same_phase:
        ok &= p[1:] == p[:-1]
    xs = x[order]
    return np.abs(np.diff(xs, axis=0))[ok]


def source_attrs(store: Any, model_id: str) -> dict[str, Any]:
    return {"store": store.path, "store_uuid": store.uuid, "store_rows": store.num_rows, "model_id": model_id,
            "views": list(store.views)}

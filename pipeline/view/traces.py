"""The numbers ``rmtl view`` shows, computed by the reward's own code: per episode and step, every
prompt's raw score (cosine of the image and text embeddings) and goal-baseline projection
(``rmtl.reward.scorer.score_embeddings``) per view and for the view mean, the rule phase and its
micro-task (``Task.phases``), the active score, ``u``, the bounds and each shaping term
(``rmtl.reward.replay.shaped_terms``: the trainer's ``RewardShaper`` run over the shown episodes in
step order), success, the curriculum stage and difficulty, and the state facts a reader checks them
against (the task's phase measure, pick-and-lift's gripper-cube distance, and the cube's height above
rest). A reset row (step 0) is scored but pays no reward (the wrapper pays the state a step ends in),
so its shaping terms are NaN."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.view.sources import Embedded, EpisodeRows


@dataclass(frozen=True)
class Trace:
    """One episode as one source and reward model see it; every per-step array is [T]."""

    rows: EpisodeRows
    phase: np.ndarray
    """Rule phase id of each step (the index into ``micro_tasks``)."""
    distance: np.ndarray
    """The task's phase measure (pick-and-lift: gripper-cube distance, m)."""
    height: np.ndarray | None
    """Cube height above its rest height (m); None for a task without one."""
    raw: np.ndarray
    """[T, V, 1 + K] cosine similarity of each view's image embedding with the baseline, then each goal."""
    projection: np.ndarray
    """[T, V, K] goal-baseline score of each goal per view (the reward's per-view scores)."""
    active: np.ndarray
    """View-mean score of the active micro-task (what the shaper shapes)."""
    shaping: dict[str, np.ndarray]
    """``reward``, ``u``, ``level``, each shaping term, ``delta``, ``low``, ``high`` (NaN on a reset row)."""

    @property
    def num_steps(self) -> int:
        return len(self.rows.step)


@dataclass(frozen=True)
class Side:
    """Everything one source and model give: the main side or the one compared with it."""

    name: str
    """'main' or 'compare' (the entity root in a recording)."""
    source: Any
    """The StoreSource or RolloutSource (frames on demand); None: the main side's frames."""
    model_id: str
    goal_names: tuple[str, ...]
    micro_tasks: tuple[str, ...]
    measure: str
    views: list[str]
    traces: dict[int, Trace]
    about: dict[str, Any] = field(default_factory=dict)
    terms_on: tuple[str, ...] = ()
    """The shaping terms switched on (every term's value is logged; delta sums these)."""

    def frames(self, episode: int) -> np.ndarray | None:
        if self.source is None:
            return None
        return self.source.frames(self.source.ids.index(episode))


def cosine(emb: np.ndarray, text: Any) -> np.ndarray:
    """[T, V, 1 + K] cosine of unit-normalised image embeddings with the baseline and each goal."""
    x = emb / np.maximum(np.linalg.norm(emb, axis=-1, keepdims=True), 1e-12)
    t = np.vstack([np.asarray(text.baseline)[None], np.asarray(text.goals)]).astype(np.float64)
    t = t / np.maximum(np.linalg.norm(t, axis=-1, keepdims=True), 1e-12)
    return (x @ t.T).astype(np.float32)


def build_side(name: str, source: Any, embedded: Embedded, alpha: float, bounds: str, frames: bool = True,
               about: dict[str, Any] | None = None) -> Side:
    """Score every episode of ``source`` with ``embedded`` and shape the active scores over all of them
    (one shaper env, episode after episode; adapted bounds from these episodes' scores)."""
    from rmtl.reward.replay import shaped_terms
    from rmtl.reward.scorer import score_embeddings
    from rmtl.reward.shaping import ShapingConfig

    task = source.task
    parts = []
    for rows, emb in zip(source.episodes, embedded.episodes):
        phase = np.asarray(task.phases(rows.state), dtype=np.int64)
        scores = score_embeddings(emb, embedded.text, alpha)
        parts.append((rows, phase, scores, cosine(emb, embedded.text)))
    active = np.concatenate([s.active(p) for _, p, s, _ in parts]).astype(np.float64)
    phase_all = np.concatenate([p for _, p, _, _ in parts])
    starts = np.cumsum([0] + [len(r.step) for r, _, _, _ in parts])
    paid = [np.arange(a, b)[r.step > 0] for (r, _, _, _), a, b in zip(parts, starts[:-1], starts[1:])]
    num = len(embedded.goal_names)
    # Only the rows a step ended in are paid (and set the adapted bounds), as in the exports.
    shaping = getattr(source, "shaping", None) or ShapingConfig()
    on = tuple(t.name for t in type(shaping).terms if getattr(shaping, t.name, False))
    flat = np.concatenate(paid) if paid else np.zeros(0, np.int64)
    local = np.cumsum([0] + [len(p) for p in paid])
    paid_terms = shaped_terms(active[flat], phase_all[flat], [np.arange(a, b) for a, b in zip(local[:-1], local[1:])],
                              shaping, num, bounds) if len(flat) else {}
    terms = {}
    for k, v in paid_terms.items():  # NaN on the rows no step ended in
        terms[k] = np.full(len(active), np.nan)
        terms[k][flat] = v
    traces = {}
    for (rows, phase, scores, raw), a, b in zip(parts, starts[:-1], starts[1:]):
        shaped = {k: v[a:b] for k, v in terms.items()}
        height = task.lift_height(rows.state) if task.lift_height is not None else None
        traces[rows.episode] = Trace(rows, phase, np.asarray(task.phase_measure(rows.state), np.float64),
                                     None if height is None else np.asarray(height, np.float64), raw,
                                     scores.per_view, active[a:b], shaped)
    return Side(name, source if frames else None, embedded.model_id, embedded.goal_names,
                tuple(task.micro_tasks.names), task.micro_tasks.measure, list(source.views), traces,
                {"source": source.name, "model": embedded.model_id, "embeddings": embedded.how, "alpha": alpha,
                 "bounds": bounds, "shaping terms on": ", ".join(on) or "none (level only)", **(about or {})}, on)


def episode_return(trace: Trace) -> float:
    """Sum of the shaped rewards of an episode's steps plus the env's +1 when it succeeds."""
    r = trace.shaping.get("reward")
    total = float(np.nansum(r)) if r is not None else float("nan")
    return total + (1.0 if bool(trace.rows.success[-1]) else 0.0)

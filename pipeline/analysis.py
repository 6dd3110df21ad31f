"""Offline analysis steps over a dataset store (no rendering): the alpha sweep (paper
Fig. 10/11), the per-view analysis (Fig. 3/8) and Stage-2 BC labels.

Analysis datasets are **Zarr v3 groups**, one per analysis, written whole (an analysis is
recomputed, never appended) into ``<store>.analysis/`` next to the store unless an
``out_dir`` is given, with the PNGs beside them:

- ``alpha_sweep.zarr`` + ``alpha_sweep_episode.png`` (Fig. 10), ``alpha_sweep_state.png`` (Fig. 11)
- ``per_view.zarr`` + ``per_view_frame.png`` (Fig. 3), ``per_view_episodes.png`` (Fig. 8)

Every group's attributes record the source store (path, uuid, committed rows), the model
id, the prompts and alpha(s), so a dataset says what it was computed from.
:func:`read_dataset` loads one back as ``(arrays, attrs)``. Layout: docs/analysis.md.

Rows analysed: rows with committed embeddings of the model that belong to an episode
(``episode >= 0``); rows appended by the live cache path (``episode < 0``, see
pipeline.live_cache) have no trajectory and are left out of per-step statistics.
The active phase of a row is the distance rule on its state (rmtl.phases.rule_phase, as
pipeline.quality and the reward wrapper's RulePhaseSelector use).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from rmtl.env.state import gripper_cube_distance, lift_height
from rmtl.errors import ConfigError, StoreError
from rmtl.phases import PHASES, rule_phase
from rmtl.reward.projection import goal_baseline_scores
from rmtl.reward.prompt_sets import PromptSet
from rmtl.reward.prompts import PromptConfig, TextEmbeddings

DEFAULT_ALPHAS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(11))
"""alpha = 0, 0.1, ..., 1 (paper Fig. 10/11)."""

PHASE_COLORS = ("#dbe9f6", "#fde7c8", "#dcefd6")
"""Background shading of approach / align / grasp in the per-step plots."""

SCORE_BLOCK_ROWS = 4096
"""Rows of embeddings read and scored at a time (bounds memory for large stores and models)."""


# ----------------------------------------------------------------------------- loading
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
    state: np.ndarray  # [N, 25]
    episode: np.ndarray  # [N]
    step: np.ndarray  # [N]
    distance: np.ndarray  # [N] gripper-cube distance (m)
    lift: np.ndarray  # [N] cube height above rest (m)
    phase: np.ndarray  # [N] rule phase (0 approach, 1 align, 2 grasp)
    views: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def episode_ids(self) -> list[int]:
        return [int(e) for e in np.unique(self.episode)]

    def episode_index(self, episode: int) -> np.ndarray:
        """Indices (into these rows, not store rows) of one episode in step order."""
        idx = np.flatnonzero(self.episode == episode)
        return idx[np.argsort(self.step[idx], kind="stable")]


def resolve_model_id(store: Any, model: str | None) -> str:
    """The store's model id for ``model``: a stored model id, a model spec (its id), or
    None when the store holds exactly one model's embeddings."""
    have = store.model_ids()
    if model is None:
        if not have:
            raise StoreError(f"{store.path} has no embeddings yet; make them with `rmtl embed --store {store.path}` "
                             f"(or render and embed in one go with `rmtl render-and-embed --store {store.path}`)")
        if len(have) != 1:
            raise ConfigError(f"{store.path} has embeddings of several models {have}; name one with --model")
        return have[0]
    try:
        from rmtl.vlm.spec import parse_spec

        mid = parse_spec(model).model_id
    except Exception:
        mid = None
    if mid in have:
        return mid
    if model in have and mid not in (None, model):
        # e.g. 'rmtl-fetch-tiny': stored by a version whose ids did not name the weights,
        # so those embeddings may be of other weights than the ones the name loads now.
        raise StoreError(f"{store.path} has embeddings under '{model}' from before model ids named their weights "
                         f"(the current weights are '{mid}'); re-embed: rmtl embed --store {store.path} --model {model}")
    if model in have:
        return model
    raise StoreError(f"{store.path} has no embeddings of '{model}' (it has {have or 'none'}); "
                     f"embed it first: rmtl embed --store {store.path} --model {model}")


def load_rows(store: Any, model_id: str, include_live: bool = False) -> StoreRows:
    """Labels of the rows with committed embeddings of ``model_id`` (episode rows only
    unless ``include_live``), in store order."""
    from pipeline.embed import _spec_of

    n = store.embedded_rows(model_id)
    if n == 0:
        raise StoreError(f"{store.path} has no embeddings of model '{model_id}' (models: {store.model_ids() or 'none'}); "
                         f"embed it first: rmtl embed --store {store.path} --model {_spec_of(store, model_id)}")
    cols = store.read(slice(0, n), fields=["state", "episode", "step"])
    keep = np.ones(n, bool) if include_live else cols["episode"] >= 0
    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        raise StoreError(f"{store.path} has no episode rows with embeddings of '{model_id}' to analyse")
    state = cols["state"][rows]
    dist = np.asarray(gripper_cube_distance(state), dtype=np.float64)
    return StoreRows(
        rows=rows, state=state, episode=cols["episode"][rows], step=cols["step"][rows],
        distance=dist, lift=np.asarray(lift_height(state), dtype=np.float64),
        phase=np.asarray(rule_phase(dist), dtype=np.int64), views=list(store.views),
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


def text_embeddings(store: Any, model_id: str, prompts: PromptConfig | PromptSet | None = None,
                    single_prompt: bool = False) -> TextEmbeddings:
    """Stored text embeddings of a prompt config (default: the paper's) or a prompt set (its
    own kind; ``single_prompt`` asks for its single goal)."""
    if isinstance(prompts, PromptSet):
        from pipeline.embed_text import prompt_set_text

        return prompt_set_text(store, model_id, prompts, True if single_prompt else None)
    from pipeline.embed import stored_text_embeddings

    return stored_text_embeddings(store, model_id, prompts or PromptConfig(), single_prompt)


def prompts_record(prompts: PromptConfig | PromptSet | None) -> dict[str, Any]:
    """What an analysis dataset records of its prompts: the set (name, id, texts) or the config."""
    if isinstance(prompts, PromptSet):
        return prompts.to_dict()
    return (prompts or PromptConfig()).model_dump(mode="json")


# ----------------------------------------------------------------------------- datasets
def default_out_dir(store: Any) -> Path:
    """``<store>.analysis`` next to a local store."""
    loc = store.location
    if not loc.is_local:
        raise ConfigError(f"{store.path} is not a local store: pass out_dir for the analysis datasets and PNGs")
    return Path(loc.sibling(".analysis").path)


def write_dataset(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> Path:
    """Write one analysis dataset as a Zarr v3 group (replacing any previous one)."""
    import json
    import warnings

    import zarr

    path = Path(path)
    g = zarr.open_group(str(path), mode="w", attributes=json.loads(json.dumps(dict(attrs), default=_json_default)))
    for name, data in arrays.items():
        a = np.asarray(data)
        if a.dtype.kind not in "biuf":
            raise TypeError(f"analysis array {name!r} must be numeric or bool, got {a.dtype}")
        arr = g.create_array(name, shape=a.shape, dtype=a.dtype)
        if a.size:
            arr[...] = a
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))
    return path


def read_dataset(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """An analysis dataset written by this module: ({name: array}, attributes)."""
    import zarr

    g = zarr.open_group(str(path), mode="r")
    return {name: a[...] for name, a in g.arrays()}, g.attrs.asdict()


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def _source_attrs(store: Any, model_id: str) -> dict[str, Any]:
    return {"store": store.path, "store_uuid": store.uuid, "store_rows": store.num_rows, "model_id": model_id,
            "views": list(store.views)}


# ----------------------------------------------------------------------------- plotting helpers
def _figure(w: float, h: float, nrows: int = 1, ncols: int = 1, **kw):
    from matplotlib.figure import Figure  # object API: no pyplot, no global backend change (Agg canvas)

    fig = Figure(figsize=(w, h), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def _shade_phases(ax, steps: np.ndarray, phase: np.ndarray, labels: bool = True) -> None:
    """Background spans of the rule phase along an episode."""
    if len(steps) == 0:
        return
    seen: set[int] = set()
    start = 0
    for i in range(1, len(steps) + 1):
        if i == len(steps) or phase[i] != phase[start]:
            p = int(phase[start])
            lo = steps[start] - 0.5
            hi = steps[i - 1] + 0.5
            ax.axvspan(lo, hi, color=PHASE_COLORS[p], lw=0, zorder=0,
                       label=PHASES[p] if labels and p not in seen else None)
            seen.add(p)
            start = i


def _alpha_colors(alphas: Sequence[float]):
    import matplotlib
    from matplotlib.colors import Normalize

    cmap = matplotlib.colormaps["viridis"]
    norm = Normalize(0.0, 1.0)
    return cmap, norm


def _colorbar(fig, ax, cmap, norm, label: str) -> None:
    from matplotlib.cm import ScalarMappable

    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=label)


def binned_means(x: np.ndarray, y: np.ndarray, edges: np.ndarray, min_count: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bin centres, per-bin mean of y ([..., N] -> [..., B]) and counts; NaN for bins with < min_count rows."""
    idx = np.digitize(x, edges[1:-1])  # 0..B-1
    nb = len(edges) - 1
    counts = np.bincount(idx, minlength=nb)[:nb]
    y2 = np.atleast_2d(y)
    sums = np.stack([np.bincount(idx, weights=row, minlength=nb)[:nb] for row in y2])
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    means[:, counts < min_count] = np.nan
    centres = 0.5 * (edges[1:] + edges[:-1])
    return centres, (means if np.ndim(y) > 1 else means[0]), counts


def rescale(active_scores: np.ndarray, lo_q: float = 1.0, hi_q: float = 99.0) -> np.ndarray:
    """Per-alpha min-max rescaling of active scores [A, N] to ~[0, 1] with p1/p99 as the
    ends (robust to single outliers), so alphas with different amplitude share an axis."""
    lo = np.percentile(active_scores, lo_q, axis=-1, keepdims=True)
    hi = np.percentile(active_scores, hi_q, axis=-1, keepdims=True)
    return (active_scores - lo) / np.maximum(hi - lo, 1e-12)


# ----------------------------------------------------------------------------- alpha sweep
@dataclass(frozen=True)
class AlphaSweepResult:
    dataset: str
    plots: dict[str, str]
    alphas: tuple[float, ...]
    episode: int
    summary: dict[str, Any]


def _pick_episode(rows: StoreRows) -> int:
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
        pv = per_view_scores(st, model_id, text, alphas, rows.rows)  # [A, N, V, K]
        out = Path(out_dir) if out_dir is not None else default_out_dir(st)
        src = _source_attrs(st, model_id)
    mean = pv.mean(axis=2)  # [A, N, K]
    act = active(mean, rows.phase)  # [A, N]
    if episode is None:
        episode = _pick_episode(rows)
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
    }, {**src, "analysis": "alpha_sweep", "alphas": list(alphas), "phases": list(PHASES),
        "prompts": prompts_record(prompts), "summary": summary})
    pngs: dict[str, str] = {}
    if plots:
        pngs["episode"] = str(plot_alpha_episode(out / "alpha_sweep_episode.png", alphas, act[:, ep_idx],
                                                 rows.step[ep_idx], rows.phase[ep_idx], episode))
        pngs["state"] = str(plot_alpha_state(out / "alpha_sweep_state.png", alphas, act, rows.distance, rows.lift, bins))
    return AlphaSweepResult(str(ds), pngs, alphas, int(episode), summary)


def plot_alpha_episode(path: Path, alphas: Sequence[float], act: np.ndarray, steps: np.ndarray, phase: np.ndarray,
                       episode: int) -> Path:
    """Fig. 10: active-micro-task score along one episode, one curve per alpha (raw scale)."""
    cmap, norm = _alpha_colors(alphas)
    fig, axes = _figure(8, 4)
    ax = axes[0, 0]
    _shade_phases(ax, steps, phase)
    for i, a in enumerate(alphas):
        ax.plot(steps, act[i], color=cmap(norm(a)), lw=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("active micro-task score (view mean)")
    ax.set_title(f"alpha sweep along episode {episode}")
    ax.legend(loc="lower right", fontsize=8, title="rule phase")
    _colorbar(fig, ax, cmap, norm, "alpha")
    fig.savefig(path, dpi=110)
    return path


def plot_alpha_state(path: Path, alphas: Sequence[float], act: np.ndarray, distance: np.ndarray, lift: np.ndarray,
                     bins: int = 20) -> Path:
    """Fig. 11: per-bin mean of the rescaled active score vs gripper-cube distance and vs
    lift height, one curve per alpha."""
    cmap, norm = _alpha_colors(alphas)
    scaled = rescale(act)
    fig, axes = _figure(11, 4, 1, 2)
    for ax, x, name in ((axes[0, 0], distance, "gripper-cube distance (m)"), (axes[0, 1], lift, "cube lift height (m)")):
        lo, hi = float(np.min(x)), float(np.percentile(x, 99.5))
        if hi <= lo:
            hi = lo + 1e-3
        edges = np.linspace(lo, hi, bins + 1)
        centres, means, _ = binned_means(np.clip(x, lo, hi), scaled, edges)
        for i, a in enumerate(alphas):
            ax.plot(centres, means[i], color=cmap(norm(a)), lw=1.5, marker=".", ms=3)
        ax.set_xlabel(name)
        ax.set_ylabel("rescaled active score (per-bin mean)")
        ax.locator_params(axis="x", nbins=6)
    axes[0, 0].set_title("reward vs distance")
    axes[0, 1].set_title("reward vs lift")
    _colorbar(fig, axes[0, 1], cmap, norm, "alpha")
    fig.savefig(path, dpi=110)
    return path


# ----------------------------------------------------------------------------- per-view analysis
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


def _step_deltas(x: np.ndarray, rows: StoreRows, same_phase: bool = True) -> np.ndarray:
    """|x_t - x_{t-1}| over consecutive steps of an episode (within one rule phase)."""
    order = np.lexsort((rows.step, rows.episode))
    e, s, p = rows.episode[order], rows.step[order], rows.phase[order]
    ok = (e[1:] == e[:-1]) & (s[1:] == s[:-1] + 1)
    if same_phase:
        ok &= p[1:] == p[:-1]
    xs = x[order]
    return np.abs(np.diff(xs, axis=0))[ok]


def per_view_analysis(
    store: Any,
    model_id: str | None = None,
    alpha: float = 0.9,
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
        pv = per_view_scores(st, model_id, text, [alpha], rows.rows)[0]  # [N, V, K]
        views = list(st.views)
        out = Path(out_dir) if out_dir is not None else default_out_dir(st)
        src = _source_attrs(st, model_id)
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

    var_view = {v: float(_step_deltas(per_view[:, i], rows).mean()) if len(rows) > 1 else float("nan")
                for i, v in enumerate(views)}
    deltas_mean = _step_deltas(mean, rows)
    var_mean = float(deltas_mean.mean()) if len(deltas_mean) else float("nan")
    sw = phase_switches(mean, rows)
    by_kind = {}
    for a, b in sorted(set(zip(sw["from"].tolist(), sw["to"].tolist()))):
        m = (sw["from"] == a) & (sw["to"] == b)
        by_kind[f"{PHASES[a]}->{PHASES[b]}"] = {"count": int(m.sum()), "mean_jump": float(sw["jump"][m].mean())}
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
    }, {**src, "analysis": "per_view", "alpha": float(alpha), "phases": list(PHASES),
        "prompts": prompts_record(prompts), "summary": summary})
    pngs: dict[str, str] = {}
    if plots:
        pngs["frame"] = str(plot_view_frame(out / "per_view_frame.png", views, per_view[frame_i], mean[frame_i],
                                            int(rows.rows[frame_i]), PHASES[int(rows.phase[frame_i])], thumbs))
        eps = list(episodes) if episodes is not None else rows.episode_ids()[:2]
        missing = [e for e in eps if e not in rows.episode_ids()]
        if missing:
            raise ConfigError(f"episodes {missing} are not among the analysed episodes")
        pngs["episodes"] = str(plot_view_episodes(out / "per_view_episodes.png", views, per_view, mean, rows, eps))
    return PerViewResult(str(ds), pngs, summary)


def plot_view_frame(path: Path, views: Sequence[str], scores: np.ndarray, mean: float, store_row: int, phase: str,
                    frames: np.ndarray | None = None) -> Path:
    """Fig. 3: one frame's active score per view (bars) vs their mean (line), with the views' thumbnails."""
    nv = len(views)
    if frames is not None:
        fig = _figure(max(6, 1.6 * nv), 5.2)[0]
        fig.clear()
        gs = fig.add_gridspec(2, nv, height_ratios=[1, 1.6])
        for i in range(nv):
            a = fig.add_subplot(gs[0, i])
            a.imshow(frames[i])
            a.set_title(views[i], fontsize=8)
            a.axis("off")
        ax = fig.add_subplot(gs[1, :])
    else:
        fig, axes = _figure(max(6, 1.2 * nv), 3.6)
        ax = axes[0, 0]
    x = np.arange(nv)
    ax.bar(x, scores, color="#4c72b0")
    ax.axhline(mean, color="k", lw=2, label=f"mean {mean:.4f}")
    ax.set_xticks(x, views, rotation=20, fontsize=8)
    pad = max(float(np.ptp(np.append(scores, mean))) * 0.3, 1e-4)
    ax.set_ylim(float(min(scores.min(), mean)) - pad, float(max(scores.max(), mean)) + pad)
    ax.set_ylabel(f"{phase} score")
    ax.set_title(f"store row {store_row}: per-view vs mean ({phase} micro-task)")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return path


def plot_view_episodes(path: Path, views: Sequence[str], per_view: np.ndarray, mean: np.ndarray, rows: StoreRows,
                       episodes: Sequence[int]) -> Path:
    """Fig. 8: per-view (thin) and view-mean (thick) active score along episodes."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    fig, axes = _figure(9, 3.2 * max(1, len(episodes)), max(1, len(episodes)), 1)
    for ax, e in zip(axes[:, 0], episodes):
        idx = rows.episode_index(e)
        st = rows.step[idx]
        _shade_phases(ax, st, rows.phase[idx], labels=False)
        for i, v in enumerate(views):
            ax.plot(st, per_view[idx, i], color=cmap(i), lw=1, alpha=0.8, label=v)
        ax.plot(st, mean[idx], color="k", lw=2.5, label="mean")
        ax.set_title(f"episode {e}")
        ax.set_ylabel("active score")
    axes[-1, 0].set_xlabel("step (background: rule phase approach/align/grasp)")
    axes[0, 0].legend(fontsize=7, ncol=min(len(views) + 1, 4), loc="best")
    fig.savefig(path, dpi=110)
    return path


# ----------------------------------------------------------------------------- BC labels
@dataclass(frozen=True)
class BCLabelsResult:
    store: str
    rows: int
    episodes_rolled: int
    episodes_total: int
    resumed: bool
    phase_counts: dict[str, int]
    minari: str | None = None
    """Id of the Minari dataset written beside the store (None: none asked for)."""


def bc_label_rows(config: Any, episodes: Sequence[int], env: Any = None) -> dict[str, np.ndarray]:
    """Roll out ``episodes`` of ``config.policy`` without rendering; rows of (state, rule
    phase, episode, step, success, difficulty) ready for DatasetStore.append (frames=False).

    ``config`` is a pipeline.rollout.RolloutConfig (views/resolution are ignored).
    Episode plans and policies are pipeline.rollout's, so episode i is the same episode
    as in a rendered store with the same config.
    """
    from pipeline.rollout import rollout_episodes

    return rollout_episodes(config, list(episodes), render=False, env=env)


def bc_labels(
    path: str | os.PathLike[str],
    policy: str = "expert",
    episodes: int = 250,
    noise_std: float = 0.15,
    stages: Sequence[int] = (0, 1, 2, 3, 4),
    seed: int = 0,
    chunk: int = 25,
    overwrite: bool = False,
    progress: bool = True,
    minari: str | None = None,
) -> BCLabelsResult:
    """Rule-phase labels on rollouts of a policy (Stage-2 BC warm start), no frames.

    Writes a frames-free dataset store at ``path`` (``DatasetStore.create(frames=False)``)
    with state, key, episode, step, phase_rule (the label), success and difficulty per
    step; appends ``chunk`` whole episodes per commit, so a killed run resumes with only
    the missing episodes (settings must match, as for render-and-embed).
    policy: 'expert', 'random' or an SB3 checkpoint (.zip, once the Stage-1 worker exists).
    minari: also write the labels as the Minari dataset of that name (dense reference reward,
    infos with the BC label; pipeline.minari_export), replacing one of the same name.
    """
    from pipeline.render import render_to_store
    from pipeline.rollout import RolloutConfig
    from storage.dataset import DatasetStore

    config = RolloutConfig.make(episodes=episodes, policy=policy, noise_std=noise_std, stages=tuple(stages), seed=seed)
    done = render_to_store(path, config, chunk=chunk, overwrite=overwrite, progress=progress, render=False,
                           kind="bc_labels")
    with DatasetStore.open(path, "r") as store:
        labels = store.read(fields=["phase_rule"])["phase_rule"]
    counts = {name: int((labels == k).sum()) for k, name in enumerate(PHASES)}
    exported = None
    if minari is not None:
        from pipeline.minari_export import export_minari

        exported = export_minari(path, minari, reward="dense", overwrite=True)["dataset_id"]
    return BCLabelsResult(str(path), done.rows, done.episodes_rendered, episodes, done.resumed, counts, exported)


def read_bc_labels(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """(state, phase_rule, episode, step, success) arrays of a bc-labels store."""
    from storage.dataset import DatasetStore

    with DatasetStore.open(path, "r") as store:
        return store.read(fields=["state", "phase_rule", "episode", "step", "success"])

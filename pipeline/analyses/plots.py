"""The analysis figures (paper Fig. 3, 8, 10, 11) and their shared helpers; matplotlib's object API only
(no pyplot, no global backend change)."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

import numpy as np

from pipeline.stores.store_rows import StoreRows


PHASE_COLORS = ("#dbe9f6", "#fde7c8", "#dcefd6")
"""Background shading of approach / align / grasp in the per-step plots."""


def figure(w: float, h: float, nrows: int = 1, ncols: int = 1, **kw):
    from matplotlib.figure import Figure  # object API: no pyplot, no global backend change (Agg canvas)

    fig = Figure(figsize=(w, h), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def shade_phases(ax, steps: np.ndarray, phase: np.ndarray, names: Sequence[str] = (), labels: bool = True) -> None:
    """Background spans of the rule phase along an episode, labelled with the micro-task ``names``."""
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
                       label=(names[p] if p < len(names) else f"phase {p}") if labels and p not in seen else None)
            seen.add(p)
            start = i


def alpha_colors(alphas: Sequence[float]):
    import matplotlib
    from matplotlib.colors import Normalize

    cmap = matplotlib.colormaps["viridis"]
    norm = Normalize(0.0, 1.0)
    return cmap, norm


def colorbar(fig, ax, cmap, norm, label: str) -> None:
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


def plot_alpha_episode(path: Path, alphas: Sequence[float], act: np.ndarray, steps: np.ndarray, phase: np.ndarray,
                       episode: int, phase_names: Sequence[str] = ()) -> Path:
    """Fig. 10: active-micro-task score along one episode, one curve per alpha (raw scale)."""
    cmap, norm = alpha_colors(alphas)
    fig, axes = figure(8, 4)
    ax = axes[0, 0]
    shade_phases(ax, steps, phase, phase_names)
    for i, a in enumerate(alphas):
        ax.plot(steps, act[i], color=cmap(norm(a)), lw=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("active micro-task score (view mean)")
    ax.set_title(f"alpha sweep along episode {episode}")
    ax.legend(loc="lower right", fontsize=8, title="rule phase")
    colorbar(fig, ax, cmap, norm, "alpha")
    fig.savefig(path, dpi=110)
    return path


def plot_alpha_state(path: Path, alphas: Sequence[float], act: np.ndarray, distance: np.ndarray, lift: np.ndarray,
                     bins: int = 20) -> Path:
    """Fig. 11: per-bin mean of the rescaled active score vs gripper-cube distance and vs
    lift height, one curve per alpha."""
    cmap, norm = alpha_colors(alphas)
    scaled = rescale(act)
    fig, axes = figure(11, 4, 1, 2)
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
    colorbar(fig, axes[0, 1], cmap, norm, "alpha")
    fig.savefig(path, dpi=110)
    return path


def plot_view_frame(path: Path, views: Sequence[str], scores: np.ndarray, mean: float, store_row: int, phase: str,
                    frames: np.ndarray | None = None) -> Path:
    """Fig. 3: one frame's active score per view (bars) vs their mean (line), with the views' thumbnails."""
    nv = len(views)
    if frames is not None:
        fig = figure(max(6, 1.6 * nv), 5.2)[0]
        fig.clear()
        gs = fig.add_gridspec(2, nv, height_ratios=[1, 1.6])
        for i in range(nv):
            a = fig.add_subplot(gs[0, i])
            a.imshow(frames[i])
            a.set_title(views[i], fontsize=8)
            a.axis("off")
        ax = fig.add_subplot(gs[1, :])
    else:
        fig, axes = figure(max(6, 1.2 * nv), 3.6)
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
    fig, axes = figure(9, 3.2 * max(1, len(episodes)), max(1, len(episodes)), 1)
    for ax, e in zip(axes[:, 0], episodes):
        idx = rows.episode_index(e)
        st = rows.step[idx]
        shade_phases(ax, st, rows.phase[idx], rows.phase_names, labels=False)
        for i, v in enumerate(views):
            ax.plot(st, per_view[idx, i], color=cmap(i), lw=1, alpha=0.8, label=v)
        ax.plot(st, mean[idx], color="k", lw=2.5, label="mean")
        ax.set_title(f"episode {e}")
        ax.set_ylabel("active score")
    axes[-1, 0].set_xlabel("step (background: rule phase approach/align/grasp)")
    axes[0, 0].legend(fontsize=7, ncol=min(len(views) + 1, 4), loc="best")
    fig.savefig(path, dpi=110)
    return path

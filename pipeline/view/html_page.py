"""One self-contained HTML page of the traces, for a reader with only a browser: per episode a strip of
frames (every view at a few steps, inline JPEG) and three plots (inline PNG, matplotlib): the view-mean
goal-baseline score of each prompt over the rule phases, ``u`` with its bounds and the shaped reward, and
the state facts with success. A table sums the episodes up. No script, no server, no external URL."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from pipeline.view.traces import Side, Trace, episode_return

GENERATOR = "rmtl view --html"
"""The page's ``<meta name="generator">``: how the command knows a page it wrote."""
STRIP_STEPS = 8
"""Steps shown in an episode's frame strip (evenly spaced, first and last included)."""
STRIP_PX = 96
"""Frames larger than this are shrunk to it in the strip."""
PHASE_COLOURS = ("#dbe9f6", "#fde9d2", "#dcefd9", "#eadcf2", "#f6dcdc")

STYLE = """
body { font-family: sans-serif; margin: 16px 24px; color: #222; max-width: 1240px; }
h1 { font-size: 20px; margin: 0 0 4px 0; } h2 { font-size: 16px; margin: 22px 0 6px 0; }
.about { font-size: 12px; color: #555; margin: 0 0 10px 0; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0 10px 0; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; } th { background: #f2f2f2; }
img { display: block; max-width: 100%; } .ok { color: #17803d; } .fail { color: #b42318; }
.legend span { display: inline-block; padding: 0 6px; margin-right: 4px; font-size: 12px; }
"""


def _data_uri(image: Any, fmt: str) -> str:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **({"quality": 85} if fmt == "JPEG" else {"optimize": True}))
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


def strip_steps(n: int, count: int = STRIP_STEPS) -> list[int]:
    """Indices of ``count`` evenly spaced rows of ``n`` (all when fewer), first and last included."""
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, min(n, count))})


def frame_strip(frames: np.ndarray, views: Sequence[str], steps: np.ndarray, label: str = "") -> Any:
    """A PIL image: one row per view, one column per sampled step, labelled."""
    from PIL import Image, ImageDraw

    pick = strip_steps(len(frames))
    h, w = frames.shape[2:4]
    scale = min(1.0, STRIP_PX / max(h, w))
    th, tw = max(1, int(h * scale)), max(1, int(w * scale))
    left, top, gap = 78, 16, 2
    out = Image.new("RGB", (left + len(pick) * (tw + gap), top + len(views) * (th + gap)), "white")
    draw = ImageDraw.Draw(out)
    for c, t in enumerate(pick):
        draw.text((left + c * (tw + gap) + 2, 2), f"step {int(steps[t])}", fill="black")
        for r, _ in enumerate(views):
            tile = Image.fromarray(np.ascontiguousarray(frames[t, r]))
            out.paste(tile.resize((tw, th)) if (th, tw) != (h, w) else tile, (left + c * (tw + gap), top + r * (th + gap)))
    for r, view in enumerate(views):
        draw.text((2, top + r * (th + gap) + th // 2 - 5), f"{label}{view}"[:12], fill="black")
    return out


def _phase_bands(ax: Any, steps: np.ndarray, phase: np.ndarray) -> None:
    for t, (s, k) in enumerate(zip(steps, phase)):
        end = steps[t + 1] if t + 1 < len(steps) else s + 1
        ax.axvspan(s - 0.5, end - 0.5, color=PHASE_COLOURS[int(k) % len(PHASE_COLOURS)], lw=0)


def episode_plots(main: tuple[Side, Trace], other: tuple[Side, Trace] | None) -> Any:
    """A PIL image of the four plots of one episode: the view-mean score of each goal over the rule
    phases, the active score inside its bounds, u with the shaped reward and its terms, the state
    facts; ``other``: the compared side, dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    side, tr = main
    steps, sh = tr.rows.step, tr.shaping
    fig, axes = plt.subplots(2, 2, figsize=(12.4, 5.2), dpi=80)
    ax = axes[0, 0]
    _phase_bands(ax, steps, tr.phase)
    mean = tr.projection.mean(axis=1)
    for k, goal in enumerate(side.goal_names):
        ax.plot(steps, mean[:, k], label=goal, lw=1.4)
    ax.set_title("view-mean goal-baseline score per prompt (bands: rule phase)", fontsize=9)
    ax = axes[0, 1]
    ax.plot(steps, tr.active, color="black", lw=1.4, label="active score")
    for name in ("low", "high"):
        if name in sh:
            ax.plot(steps, sh[name], ls=":", lw=1.3, label=name)
    if other is not None:
        ax.plot(other[1].rows.step, other[1].active, color="black", lw=1.2, ls="--", label=f"{other[0].name}: active")
    ax.set_title("active micro-task's score and its bounds", fontsize=9)
    ax = axes[1, 0]
    for name in ("u", "level", *side.terms_on, "reward"):
        if name in sh:
            ax.plot(steps, sh[name], lw=1.8 if name == "reward" else 1.1, label="shaped reward" if name == "reward" else name,
                    color="black" if name == "reward" else None)
    if other is not None and "reward" in other[1].shaping:
        ax.plot(other[1].rows.step, other[1].shaping["reward"], lw=1.4, color="black", ls="--",
                label=f"{other[0].name}: reward")
    ax.set_title("u, the shaping terms and the shaped reward", fontsize=9)
    ax = axes[1, 1]
    ax.plot(steps, tr.distance, label=side.measure, lw=1.4)
    if tr.height is not None:
        ax.plot(steps, tr.height, label="cube height above rest (m)", lw=1.4)
    done = np.flatnonzero(tr.rows.success)
    if len(done):
        ax.axvline(steps[done[0]], color="#17803d", lw=1.2, label="success")
    ax.set_title("state facts", fontsize=9)
    for ax in axes.ravel():
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "n/a" if np.isnan(value) else f"{value:.3f}"
    return html.escape(str(value))


def write_page(path: Path, sides: Sequence[Side], episodes: Sequence[int], title: str,
               tick: Callable[[], None] = lambda: None) -> Path:
    """Write the page of ``episodes`` of ``sides`` (the first is the main one) to ``path`` whole."""
    from storage.whole_file import write_file_whole

    main, others = sides[0], list(sides[1:])
    legend = "".join(f'<span style="background:{PHASE_COLOURS[k % len(PHASE_COLOURS)]}">phase {k}: '
                     f'{html.escape(n)}</span>' for k, n in enumerate(main.micro_tasks))
    head = ["episode", "steps", "success", "stage", "difficulty", f"return ({main.name})",
            *[f"return ({o.name})" for o in others]]
    rows, sections = [], []
    for e in episodes:
        tr = main.traces[e]
        ok = bool(tr.rows.success[-1])
        rows.append([e, tr.num_steps - int(tr.rows.step[0] == 0), "yes" if ok else "no",
                     "n/a" if tr.rows.stage is None else tr.rows.stage, float(tr.rows.difficulty[0]),
                     episode_return(tr), *[episode_return(o.traces[e]) if e in o.traces else float("nan")
                                           for o in others]])
        parts = [f'<h2 id="episode-{e}">episode {e}: <span class="{"ok" if ok else "fail"}">'
                 f'{"success" if ok else "no success"}</span></h2>']
        frames = main.frames(e)
        if frames is not None:
            parts.append(f'<img alt="episode {e} frames" src="{_data_uri(frame_strip(frames, main.views, tr.rows.step), "JPEG")}">')
        for o in others:
            if o.source is not None and e in o.traces and (f := o.frames(e)) is not None:
                strip = frame_strip(f, o.views, o.traces[e].rows.step, f"{o.name}:")
                parts.append(f'<img alt="episode {e} frames ({o.name})" src="{_data_uri(strip, "JPEG")}">')
        other = next(((o, o.traces[e]) for o in others if e in o.traces), None)
        parts.append(f'<img alt="episode {e} plots" src="{_data_uri(episode_plots((main, tr), other), "PNG")}">')
        sections.append("\n".join(parts))
        tick()
    about = "".join(f'<p class="about"><b>{html.escape(s.name)}</b>: ' + "; ".join(
        f"{html.escape(str(k))} {html.escape(str(v))}" for k, v in s.about.items()) + "</p>" for s in sides)
    table = ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
             + "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in r) + "</tr>" for r in rows) + "</table>")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="generator" content="{GENERATOR}"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n<h1>{html.escape(title)}</h1>\n{about}"
            f'<div class="legend">{legend}</div>\n{table}\n' + "\n".join(sections) + "\n</body></html>\n")
    write_file_whole(path, page)
    return Path(path)


def is_own_page(path: str | Path) -> bool:
    """Whether ``path`` is a page this command wrote (its generator meta tag near the top)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR}">'.encode() in head

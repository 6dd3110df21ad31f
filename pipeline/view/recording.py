"""A Rerun recording of the traces (``rerun-sdk``; docs/view.md has the entity tree and a reader).

One recording, timeline ``step`` (the env step within an episode), one entity root per episode
(``episode_<id>``) and under it one per side (``main``, ``compare``):

- ``views/<view>``: the camera frames (Image);
- ``scores/<view or mean>/<prompt>/raw`` (cosine with the baseline and each goal) and
  ``scores/<view or mean>/<goal>/projection`` (the goal-baseline score the reward uses);
- ``reward/<term>``: ``active_score``, ``u``, ``low``, ``high``, ``level``, each shaping term, ``delta``,
  ``reward`` (from step 1: a reset row pays nothing);
- ``rule/phase`` (the micro-task's index) and ``rule/micro_task`` (its name, with the step's numbers);
- ``env/success``, ``env/stage`` (curriculum stage), ``env/difficulty`` (its draw of u);
- ``state/<phase measure>`` and ``state/cube_height``; ``about`` (static): what the side is.

The default blueprint has one tab per episode: the views, the view-mean projections, u with its
bounds, the shaped reward and its terms, the state facts, the phase with success and stage, the
micro-task card, and the compared side's scores and reward beside them.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from pipeline.view.traces import Side, Trace

APP_ID = "rmtl view"
"""The application id of every recording this command writes (how it knows its own files)."""


def slug(text: str) -> str:
    """An entity-path part: letters, digits, '_' and '-' (anything else becomes '_')."""
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in text.strip()) or "_"


def measure_name(measure: str) -> str:
    """The entity name of a task's phase measure ('gripper-cube distance (m)' -> 'gripper_cube_distance')."""
    return slug(measure.split("(")[0].strip().replace("-", " ").replace(" ", "_"))


def episode_root(episode: int) -> str:
    return f"episode_{episode}"


def _scalars(rec: Any, path: str, steps: np.ndarray, values: np.ndarray, name: str) -> None:
    import rerun as rr

    keep = np.isfinite(values)
    if not keep.any():
        return
    rec.log(path, rr.SeriesLines(names=name), static=True)
    rec.send_columns(path, indexes=[rr.TimeColumn("step", sequence=steps[keep])],
                     columns=rr.Scalars.columns(scalars=np.asarray(values, np.float64)[keep]))


def log_side(rec: Any, side: Side, trace: Trace, frames: np.ndarray | None, jpeg_quality: int = 0) -> None:
    """Log one side of one episode (module docstring) into ``rec``."""
    import rerun as rr

    root = f"{episode_root(trace.rows.episode)}/{side.name}"
    steps = np.asarray(trace.rows.step, np.int64)
    about = "\n".join(f"- **{k}**: {v}" for k, v in side.about.items())
    rec.log(f"{root}/about", rr.TextDocument(f"### {side.name}\n{about}", media_type="text/markdown"), static=True)
    if frames is not None:
        for t, step in enumerate(steps):
            rec.set_time("step", sequence=int(step))
            for v, view in enumerate(side.views):
                image = rr.Image(np.ascontiguousarray(frames[t, v]))
                rec.log(f"{root}/views/{slug(view)}", image.compress(jpeg_quality) if jpeg_quality else image)
    prompts = ("baseline", *side.goal_names)
    for v, view in enumerate([*side.views, "mean"]):
        raw = trace.raw.mean(axis=1) if view == "mean" else trace.raw[:, v]
        proj = trace.projection.mean(axis=1) if view == "mean" else trace.projection[:, v]
        for k, prompt in enumerate(prompts):
            _scalars(rec, f"{root}/scores/{slug(view)}/{slug(prompt)}/raw", steps, raw[:, k], f"{prompt} (raw)")
        for k, goal in enumerate(side.goal_names):
            _scalars(rec, f"{root}/scores/{slug(view)}/{slug(goal)}/projection", steps, proj[:, k], goal)
    _scalars(rec, f"{root}/reward/active_score", steps, trace.active, "active score")
    for name, values in trace.shaping.items():
        _scalars(rec, f"{root}/reward/{slug(name)}", steps, values, name)
    _scalars(rec, f"{root}/rule/phase", steps, trace.phase.astype(np.float64), "phase")
    _scalars(rec, f"{root}/env/success", steps, trace.rows.success.astype(np.float64), "success")
    _scalars(rec, f"{root}/env/difficulty", steps, trace.rows.difficulty.astype(np.float64), "difficulty")
    if trace.rows.stage is not None:
        _scalars(rec, f"{root}/env/stage", steps, np.full(len(steps), float(trace.rows.stage)), "curriculum stage")
    _scalars(rec, f"{root}/state/{measure_name(side.measure)}", steps, trace.distance, side.measure)
    if trace.height is not None:
        _scalars(rec, f"{root}/state/cube_height", steps, trace.height, "cube height above rest (m)")
    for t, step in enumerate(steps):
        rec.set_time("step", sequence=int(step))
        rec.log(f"{root}/rule/micro_task", rr.TextDocument(step_card(side, trace, t), media_type="text/markdown"))


def step_card(side: Side, trace: Trace, t: int) -> str:
    """The micro-task card of step ``t``: the active micro-task and the step's numbers."""
    k = int(trace.phase[t])
    lines = [f"## {side.micro_tasks[k]} (phase {k})", f"step {int(trace.rows.step[t])}, episode {trace.rows.episode}",
             f"- {side.measure}: {trace.distance[t]:.4f}"]
    if trace.height is not None:
        lines.append(f"- cube height above rest: {trace.height[t]:.4f} m")
    lines.append(f"- active score: {trace.active[t]:.4f}")
    for name in ("u", "reward"):
        value = trace.shaping.get(name, np.full(t + 1, np.nan))[t]
        lines.append(f"- {name}: " + ("none (reset row)" if np.isnan(value) else f"{value:.4f}"))
    lines.append(f"- success: {bool(trace.rows.success[t])}")
    return "\n".join(lines)


def blueprint(sides: Sequence[Side], episodes: Sequence[int]) -> Any:
    """One tab per episode (module docstring)."""
    import rerun.blueprint as rrb

    main = sides[0]
    tabs = []
    for e in episodes:
        root = f"{episode_root(e)}/main"
        views = rrb.Grid(*[rrb.Spatial2DView(origin=f"{root}/views/{slug(v)}", name=v) for v in main.views],
                         grid_columns=min(6, max(1, len(main.views))))
        per_view = rrb.Tabs(*[rrb.TimeSeriesView(origin=f"{root}/scores/{slug(v)}", contents="$origin/*/projection",
                                                 name=f"{v} projection") for v in ["mean", *main.views]])
        rows = [views, rrb.Horizontal(
            per_view,
            rrb.TimeSeriesView(origin=f"{root}/reward", name="u and bounds",
                               contents=[f"$origin/{k}" for k in ("active_score", "u", "low", "high")]),
            rrb.TimeSeriesView(origin=f"{root}/reward", name="shaped reward",
                               contents=[f"$origin/{k}" for k in ("level", *main.terms_on, "delta", "reward")])),
            rrb.Horizontal(
                rrb.TimeSeriesView(origin=f"{root}/state", name="state facts"),
                rrb.TimeSeriesView(origin=root, name="phase, success, stage",
                                   contents=["$origin/rule/phase", "$origin/env/success", "$origin/env/stage"]),
                rrb.TextDocumentView(origin=f"{root}/rule/micro_task", name="micro-task"))]
        for other in sides[1:]:
            croot = f"{episode_root(e)}/{other.name}"
            row: list[Any] = [rrb.TimeSeriesView(origin=f"{croot}/scores/mean", contents="$origin/*/projection",
                                                 name=f"{other.name}: mean projection"),
                              rrb.TimeSeriesView(origin=f"{croot}/reward", name=f"{other.name}: u and reward",
                                                 contents=[f"$origin/{k}" for k in ("u", "low", "high", "reward")]),
                              rrb.TextDocumentView(origin=f"{croot}/about", name=f"{other.name}: what it is")]
            if other.source is not None:
                row.insert(0, rrb.Grid(*[rrb.Spatial2DView(origin=f"{croot}/views/{slug(v)}", name=v)
                                         for v in other.views], grid_columns=3))
            rows.append(rrb.Horizontal(*row))
        tabs.append(rrb.Vertical(*rows, name=f"episode {e}"))
    return rrb.Blueprint(rrb.Tabs(*tabs), collapse_panels=False)


def write_recording(path: Path, sides: Sequence[Side], episodes: Sequence[int], jpeg_quality: int = 0,
                    tick: Callable[[], None] = lambda: None) -> Path:
    """Write the recording of ``episodes`` of ``sides`` (the first is the main one) to ``path``: into a
    temporary file beside it, renamed over it when complete (a stopped run leaves any earlier file)."""
    import rerun as rr

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.writing")
    rec = rr.RecordingStream(APP_ID, recording_id=uuid.uuid4())
    try:
        try:
            rec.save(tmp, default_blueprint=blueprint(sides, episodes))
            for e in episodes:
                for side in sides:
                    if e in side.traces:
                        log_side(rec, side, side.traces[e], side.frames(e), jpeg_quality)
                tick()
            rec.flush()
        finally:
            rec.disconnect()  # closes the file (its footer written)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def recording_app_id(path: str | os.PathLike[str]) -> str | None:
    """The application id of the (first) recording in an .rrd file; None if it is not one Rerun reads."""
    try:
        from rerun.chunk import RrdReader

        found = RrdReader(str(path)).recordings()
    except Exception:  # not an RRD file (or a damaged one): not ours to replace
        return None
    return found[0].application_id if found else None


def read_recording(path: str | os.PathLike[str], images: bool = False) -> dict[str, dict[str, dict[Any, Any]]]:
    """A recording read back with Rerun's own reader: ``{entity path: {component: {step: value}}}``, each
    value the logged batch as a list (static values under the key None); an image's buffer is its byte
    count, or with ``images`` its bytes (uint8 [n])."""
    import pyarrow.compute as pc
    from rerun.chunk import RrdReader

    out: dict[str, dict[str, dict[Any, Any]]] = {}
    for chunk in RrdReader(str(path)).stream():
        batch = chunk.to_record_batch()
        names = batch.schema.names
        steps = batch.column("step").to_pylist() if "step" in names else [None] * batch.num_rows
        for name in names:
            if name.startswith("rerun.controls") or name in ("step", "log_time"):
                continue
            column = batch.column(name)
            if name.endswith((":buffer", ":blob")):  # one image a row: its bytes (uint8 [n]) or their count
                blobs = column.flatten()
                values = ([np.asarray(v, np.uint8) for v in blobs.to_pylist()] if images
                          else pc.list_value_length(blobs).to_pylist())
            else:
                values = column.to_pylist()
            slot = out.setdefault(chunk.entity_path, {}).setdefault(name, {})
            for s, v in zip(steps, values):
                slot[s] = v
    return out

"""``rmtl view``: checks first (the output path, the comparison, a display for --spawn), then the
episodes and their numbers (``sources``, ``traces``), then the recording or the page, then the viewer
when asked. :func:`run` is the Python entry (``run(ViewConfig(...))``), :func:`view` the command."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.view.config import ViewConfig, default_out
from rmtl.errors import ConfigError

COMPARE_KINDS = ("store", "policy", "model")


@dataclass(frozen=True)
class ViewResult:
    path: Path
    episodes: list[int]
    sides: list[dict[str, Any]]
    """Each side's ``about`` (source, model, embeddings, alpha, bounds), the main one first."""
    html: bool
    available: int | None = None
    """Episodes the store holds when they were not named (None: named, or a policy's rollouts)."""


def check_out(out: Path, html: bool) -> Path:
    """One line, before any work, if ``out`` is not a file this command may write: the wrong suffix,
    a folder, a file it did not write (it replaces only its own recordings or pages), a place inside a
    dataset store, or one that cannot be written."""
    from pipeline.view.html_page import is_own_page
    from pipeline.view.recording import APP_ID, recording_app_id
    from rmtl.console import check_output_file
    from rmtl.outputs import what_is

    want, what = (".html", "an HTML page") if html else (".rrd", "a Rerun recording")
    out = Path(out).expanduser().absolute()
    if out.suffix != want:
        raise ConfigError(f"--out {out}: rmtl view writes {what} as a {want} file; end the name with {want}")
    parent = next(a for a in (out.parent, *out.parent.parents) if a.exists())
    found = what_is(parent) if parent.is_dir() else None
    if found and found[0] in ("store", "store-node", "zarr"):
        raise ConfigError(f"--out {out} lies inside {found[1]} ({parent}); nothing is written into a store: "
                          f"choose another --out")
    found = what_is(out)
    if found is not None and found[0] != "file":
        raise ConfigError(f"--out {out} is {found[1]}; pass the path of a {want} file")
    if found is not None:
        own = is_own_page(out) if html else recording_app_id(out) == APP_ID
        if not own:
            raise ConfigError(f"--out {out} is a file rmtl view did not write; it replaces only its own {what}s: "
                              f"choose another --out, or move that file away")
    return check_output_file(out, "--out")


def compare_kind(target: str) -> str:
    """What ``--compare`` names: 'store', 'policy' or 'model' (one line if it is none of them)."""
    from rmtl.outputs import what_is

    if "://" in target and not target.startswith("file://"):
        return "store"
    p = Path(target.removeprefix("file://")).expanduser()
    if p.exists():
        found = what_is(p) or ("folder", "an empty folder")
        if found[0] == "store":
            return "store"
        if found[0] in ("stage1-run", "stage2-run") or (p / "model.zip").is_file() or p.name == "model.zip":
            return "policy"
        if found[0] == "model" or p.is_file():
            return "model"
        raise ConfigError(f"--compare {target} is {found[1]}; pass a dataset store, a Stage-1 policy (a run folder, "
                          f"its best/ or a model.zip) or a reward model spec")
    if target.endswith(".zarr") or target.endswith(".zip") or target.startswith(("/", "./", "../", "~")):
        raise ConfigError(f"--compare {target} does not exist; pass an existing dataset store or Stage-1 policy, "
                          f"or a reward model spec")
    return "model"


def check_display() -> None:
    """--spawn opens a native window: refuse at once where there is no display to open it on."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise ConfigError("--spawn opens the native Rerun viewer, which needs a display (neither DISPLAY nor "
                          "WAYLAND_DISPLAY is set); open the .rrd where there is one (`rerun FILE`) or serve it to a "
                          "browser with --serve")


def rerun_binary() -> list[str]:
    """The Rerun viewer's executable that ``rerun-sdk`` installs (run directly, so that stopping it stops the
    viewer: ``python -m rerun`` runs it as a child process of its own)."""
    import importlib.util

    if os.environ.get("RERUN_CLI_PATH"):
        return [os.environ["RERUN_CLI_PATH"]]
    spec = importlib.util.find_spec("rerun_cli")
    if spec is not None and spec.origin:
        folder = Path(spec.origin).parent
        for exe in (folder / "Rerun.app" / "Contents" / "MacOS" / "Rerun", folder / "rerun", folder / "rerun.exe"):
            if exe.is_file():
                return [str(exe)]
    return [sys.executable, "-m", "rerun"]


def viewer_command(path: Path, serve: bool, web_port: int) -> list[str]:
    """The Rerun viewer of ``path``: native (spawn), or its web viewer served over HTTP (serve)."""
    base = rerun_binary()
    if serve:
        return [*base, "--serve-web", "--web-viewer-port", str(web_port), str(path)]
    return [*base, str(path)]


def run(cfg: ViewConfig, progress: bool | None = None) -> ViewResult:
    """Write the recording (or page) of ``cfg``; returns where and what (the viewer is :func:`view`'s)."""
    from pipeline.stores.questions import prompt_set_of
    from pipeline.view.sources import RolloutSource, StoreSource, checkpoint_name
    from rmtl.console import progress as progress_display

    policy_name = checkpoint_name(cfg.policy) if cfg.policy is not None else None
    out = check_out(default_out(cfg, policy_name), cfg.html)
    kind = compare_kind(cfg.compare) if cfg.compare is not None else None
    if cfg.spawn:
        check_display()
    pset = prompt_set_of(cfg.prompts)
    show = progress if progress is not None else cfg.progress
    sources: list[Any] = []
    main: Any
    try:
        with progress_display(show) as bar:
            if cfg.policy is not None:
                ids = cfg.shown_episodes(None)
                task = bar.add_task("roll out and render", total=len(ids))
                main = RolloutSource(cfg.policy, ids, cfg.model, cfg.seed, cfg.stages, cfg.deterministic,
                                     tick=lambda: bar.advance(task))
            else:
                main = StoreSource(cfg.store_path(), cfg.shown_episodes)
            sources.append(main)
            sides = [_side(bar, "main", main, cfg.model, pset, cfg)]
            if kind == "model":
                sides.append(_side(bar, "compare", main, cfg.compare, pset, cfg, frames=False))
            elif kind is not None:
                other = _compare_source(bar, cfg, kind, main.ids)
                sources.append(other)
                sides.append(_side(bar, "compare", other, cfg.compare_model or cfg.model, pset, cfg))
            task = bar.add_task("write page" if cfg.html else "log recording", total=len(main.ids))
            tick = lambda: bar.advance(task)  # noqa: E731
            if cfg.html:
                from pipeline.view.html_page import write_page

                write_page(out, sides, main.ids, f"rmtl view: {main.name}", tick=tick)
            else:
                from pipeline.view.recording import write_recording

                write_recording(out, sides, main.ids, cfg.jpeg_quality, tick=tick)
    finally:
        for s in sources:
            s.close()
    available = None if cfg.episodes else getattr(main, "available", None)  # a store's default selection
    return ViewResult(out, list(main.ids), [s.about for s in sides], cfg.html, available)


def _side(bar: Any, name: str, source: Any, model: str | None, pset: Any, cfg: ViewConfig, frames: bool = True) -> Any:
    from pipeline.view.traces import build_side

    task = bar.add_task(f"{name}: embeddings", total=len(source.ids))
    embedded = source.embedded(model, pset, tick=lambda: bar.advance(task))
    about = {"prompts": pset.name if pset is not None else "the task's (paper)"}
    return build_side(name, source, embedded, cfg.alpha, cfg.bounds, frames=frames, about=about)


def _compare_source(bar: Any, cfg: ViewConfig, kind: str, ids: list[int]) -> Any:
    from pipeline.view.sources import RolloutSource, StoreSource

    if kind == "store":
        other = StoreSource(str(cfg.compare), lambda available: list(ids), missing_ok=True)
        if not other.ids:
            other.close()
            raise ConfigError(f"--compare store {cfg.compare} has none of the episodes shown ({ids}); compare stores "
                              f"of the same episode ids, or name shared ones with --episodes")
        return other
    task = bar.add_task("compare: roll out and render", total=len(ids))
    return RolloutSource(str(cfg.compare), ids, cfg.compare_model or cfg.model, cfg.seed, cfg.stages,
                         cfg.deterministic, tick=lambda: bar.advance(task))


def describe(res: ViewResult) -> str:
    """What was written, for the command's output."""
    lines = [f"wrote {res.path} ({len(res.episodes)} episode{'s' * (len(res.episodes) != 1)}: "
             f"{', '.join(map(str, res.episodes))})"]
    if res.available is not None and res.available > len(res.episodes):
        lines.append(f"  the store holds {res.available} episodes; these are its first ones: name others with --episodes")
    for name, about in zip(("main", "compare"), res.sides):
        lines.append(f"  {name}: {about['source']}, model {about['model']} ({about['embeddings']}), "
                     f"alpha {about['alpha']}, bounds {about['bounds']}")
    if res.html:
        lines.append(f"open it in a browser: file://{res.path}")
    else:
        lines.append(f"open it with the Rerun viewer: rerun {res.path} (or rmtl view ... --spawn / --serve)")
    return "\n".join(lines)


def view(cfg: ViewConfig) -> None:
    """Look at the reward: a store's episodes (or a policy's rollouts, rendered now) beside every number the
    reward computes on them, as a Rerun recording (.rrd: open it with `rerun FILE`, --spawn or --serve) or
    one self-contained HTML page (--html); docs/view.md."""
    res = run(cfg)
    print(describe(res), flush=True)
    if cfg.spawn:
        proc = subprocess.Popen(viewer_command(res.path, False, cfg.web_port), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"opened the Rerun viewer on {res.path} (pid {proc.pid})")
    elif cfg.serve:
        serve(res.path, cfg.web_port)


GRPC_PORT = 9876
"""Where Rerun's server (``rerun --serve-web``) takes the recording's data from; the page connects to it."""


def serve(path: Path, web_port: int) -> None:
    """Serve ``path`` with Rerun's web viewer until Ctrl-C (which ends the command normally: the file stays)."""
    url = f"http://localhost:{web_port}/?url=rerun%2Bhttp%3A%2F%2Flocalhost%3A{GRPC_PORT}%2Fproxy"
    print(f"serving {path} to a browser at {url} (Ctrl-C stops it)", flush=True)
    proc = subprocess.Popen(viewer_command(path, True, web_port))
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"stopped serving (Ctrl-C); the recording stays at {path}", flush=True)
        return
    if code != 0:
        raise ConfigError(f"the Rerun web viewer stopped with status {code} (are ports {web_port} and {GRPC_PORT} "
                          f"free? choose another web port with --web-port); the recording is at {path}")

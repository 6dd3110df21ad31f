"""The configs of the ``rmtl env`` and ``rmtl store`` commands and what each runs (their
command lines: rmtl.command_table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import tyro
from pydantic import Field

from rmtl.config import MAX_EPISODES, Config
from rmtl.console import check_output_file
from rmtl.errors import RmtlError


class EnvPreviewConfig(Config):
    """``rmtl env preview``: a labelled PNG montage of the camera views of one seeded reset."""

    difficulty: float = 0.5
    """Start difficulty u in [0, 1]."""
    seed: int = Field(0, ge=0)
    """Reset seed."""
    resolution: int = 224
    """Square frame size in pixels (64-720)."""
    views: str = "all"
    """Comma-separated view names, or 'all'."""
    visual_domain: bool = True
    """Apply the paper's visual domain."""
    shadows: bool = True
    """Render shadows (slower, nicer)."""
    out: str | None = None
    """PNG path (default <data-dir>/preview/...)."""
    data_dir: str | None = None
    """Data directory (default $RMTL_DATA_DIR or ./data)."""


class EnvCheckConfig(Config):
    """``rmtl env check``: success rates of the scripted expert and of random actions."""

    episodes: int = Field(100, ge=1, le=MAX_EPISODES)
    """Episodes per row."""
    seed: int = Field(0, ge=0)
    """First episode seed."""
    noise: float = Field(0.0, ge=0)
    """Expert action noise std."""
    out: str | None = None
    """JSON path for the rates."""


class StoreVerifyConfig(Config):
    """``rmtl store verify STORE``."""

    store: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="STORE")]
    """Dataset store path or URL."""


def env_preview(cfg: EnvPreviewConfig) -> None:
    """Write a labelled PNG montage of the camera views for one seeded reset."""
    from rmtl.provenance import data_dir as resolve_data_dir
    from rmtl.tasks import get_task
    from rmtl.viz import montage

    task = get_task()
    task.check_difficulty(cfg.difficulty)
    env_cfg = task.env_config.make(views=cfg.views, resolution=cfg.resolution, visual_domain=cfg.visual_domain,
                                   shadows=cfg.shadows)
    out = Path(cfg.out) if cfg.out else (resolve_data_dir(cfg.data_dir) / "preview" /
                                         f"preview_d{cfg.difficulty:.2f}_s{cfg.seed}_{cfg.resolution}px.png")
    check_output_file(out, "--out")  # before rendering
    env = task.make_env(env_cfg)
    _, info = env.reset(seed=cfg.seed, options={"difficulty": cfg.difficulty})
    frames = env.render_views()
    env.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    montage(frames, list(env_cfg.views)).save(out)
    print(f"gripper-cube distance {info['gripper_cube_distance']:.3f} m, rule phase {info['phase_rule']}\n"
               f"wrote {out}")


def env_check(cfg: EnvCheckConfig) -> None:
    """Success rates of the scripted expert (difficulty 1 and 0) and of random actions."""
    from rich.console import Console
    from rich.table import Table

    from rmtl.env.check import random_policy, success_rate
    from rmtl.tasks import get_task

    out = Path(cfg.out) if cfg.out else None
    if out is not None:
        check_output_file(out, "--out")
    task = get_task()
    env = task.make_env()
    n, seed = cfg.episodes, cfg.seed
    rows = [
        success_rate(env, task.expert(cfg.noise, seed), "expert", n, 1.0, seed),
        success_rate(env, task.expert(cfg.noise, seed), "expert", n, 0.0, seed),
        success_rate(env, random_policy(env, seed), "random", n, 1.0, seed),
    ]
    table = Table(title=f"Pick-and-lift success ({n} seeded episodes each, expert noise {cfg.noise})")
    for col in ("policy", "difficulty", "success rate", "95% CI", "mean length"):
        table.add_column(col)
    for r in rows:
        lo, hi = r.wilson_interval()
        table.add_row(r.policy, f"{r.difficulty:.1f}", f"{r.rate:.2f}", f"[{lo:.2f}, {hi:.2f}]", f"{r.mean_length:.1f}")
    Console().print(table)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps([{**r.__dict__, "rate": r.rate} for r in rows], indent=2))
        print(f"wrote {out}")


def store_verify(cfg: StoreVerifyConfig) -> None:
    """Read every committed chunk of a store and name the damaged ones (array, chunk, rows); status 2 if any."""
    from storage.dataset import DatasetStore

    with DatasetStore.open(cfg.store, "r") as st:
        rep = st.verify()
    kind = "checksummed" if rep.checksums else "no checksums (an older store: changed bytes go unnoticed)"
    for d in rep.damage:
        print(f"DAMAGED {d.describe()}")
    print(f"{rep.store}: {rep.arrays} arrays, {rep.chunks} chunks read, {kind}; "
               f"{len(rep.damage) or 'no'} damaged")
    if rep.damage:
        raise RmtlError(f"store {rep.store} has {len(rep.damage)} damaged part(s), listed above; restore the store "
                        f"from a copy, or re-create it (rmtl render-and-embed --store NEW_PATH)")

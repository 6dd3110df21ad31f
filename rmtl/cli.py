"""The ``rmtl`` command. Each group lives with the package that owns the work; this
module only wires them together and turns user errors into one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from rmtl.errors import RmtlError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="RMTL: phased multi-view VLM rewards for Fetch.")
env_app = typer.Typer(no_args_is_help=True, help="The Fetch pick-and-lift environment.")
app.add_typer(env_app, name="env")

DataDirOption = typer.Option(None, "--data-dir", help="Data directory (default $RMTL_DATA_DIR or ./data).")


@env_app.command("preview")
def env_preview(
    difficulty: float = typer.Option(0.5, help="Start difficulty u in [0, 1]."),
    seed: int = typer.Option(0, help="Reset seed."),
    resolution: int = typer.Option(224, help="Square frame size in pixels (64-720)."),
    views: str = typer.Option("all", help="Comma-separated view names, or 'all'."),
    visual_domain: bool = typer.Option(True, help="Apply the paper's visual domain."),
    shadows: bool = typer.Option(True, help="Render shadows (slower, nicer)."),
    out: Optional[Path] = typer.Option(None, help="PNG path (default <data-dir>/preview/...)."),
    data_dir: Optional[Path] = DataDirOption,
) -> None:
    """Write a labelled PNG montage of the camera views for one seeded reset."""
    from rmtl.env import EnvConfig, FetchPickAndLiftEnv
    from rmtl.env.fetch_lift import check_difficulty
    from rmtl.provenance import data_dir as resolve_data_dir
    from rmtl.viz import montage

    check_difficulty(difficulty)
    cfg = EnvConfig.make(views=views, resolution=resolution, visual_domain=visual_domain, shadows=shadows)
    env = FetchPickAndLiftEnv(cfg)
    _, info = env.reset(seed=seed, options={"difficulty": difficulty})
    frames = env.render_views()
    env.close()
    if out is None:
        out = resolve_data_dir(data_dir) / "preview" / f"preview_d{difficulty:.2f}_s{seed}_{resolution}px.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    montage(frames, list(cfg.views)).save(out)
    typer.echo(
        f"gripper-cube distance {info['gripper_cube_distance']:.3f} m, rule phase {info['phase_rule']}\n"
        f"wrote {out}"
    )


@env_app.command("check")
def env_check(
    episodes: int = typer.Option(100, min=1, help="Episodes per row."),
    seed: int = typer.Option(0, help="First episode seed."),
    noise: float = typer.Option(0.0, min=0.0, help="Expert action noise std."),
    out: Optional[Path] = typer.Option(None, help="JSON path for the rates."),
) -> None:
    """Success rates of the scripted expert (difficulty 1 and 0) and of random actions."""
    from rich.console import Console
    from rich.table import Table

    from rmtl.env import FetchPickAndLiftEnv
    from rmtl.env.check import expert_policy, random_policy, success_rate

    env = FetchPickAndLiftEnv()
    rows = [
        success_rate(env, expert_policy(noise, seed), "expert", episodes, 1.0, seed),
        success_rate(env, expert_policy(noise, seed), "expert", episodes, 0.0, seed),
        success_rate(env, random_policy(env, seed), "random", episodes, 1.0, seed),
    ]
    table = Table(title=f"Pick-and-lift success ({episodes} seeded episodes each, expert noise {noise})")
    for col in ("policy", "difficulty", "success rate", "95% CI", "mean length"):
        table.add_column(col)
    for r in rows:
        lo, hi = r.wilson_interval()
        table.add_row(r.policy, f"{r.difficulty:.1f}", f"{r.rate:.2f}", f"[{lo:.2f}, {hi:.2f}]", f"{r.mean_length:.1f}")
    Console().print(table)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps([{**r.__dict__, "rate": r.rate} for r in rows], indent=2))
        typer.echo(f"wrote {out}")


@app.command("render-and-embed")
def render_and_embed_cmd(
    episodes: int = typer.Option(8, min=1, help="Episodes to roll out."),
    policy: str = typer.Option("expert", help="'expert', 'random' or an SB3 checkpoint (.zip)."),
    noise_std: float = typer.Option(0.15, min=0.0, help="Expert action noise."),
    stages: str = typer.Option("0,1,2,3,4", help="Curriculum stages episodes cycle through."),
    views: str = typer.Option("all", help="Comma-separated views or 'all'."),
    resolution: Optional[int] = typer.Option(None, help="Frame size (px); default: the model's input size."),
    model: str = typer.Option("rmtl-fetch-tiny", help="VLM spec (name, name:tag, hf-hub:..., local dir or file)."),
    batch_size: int = typer.Option(64, min=1, help="Images per VLM call."),
    workers: int = typer.Option(1, min=1, help="Render processes (Dask LocalCluster when > 1)."),
    dask_address: Optional[str] = typer.Option(None, help="Existing Dask scheduler address."),
    store: Optional[str] = typer.Option(None, help="Store path (default <data-dir>/stores/<name>.zarr)."),
    name: str = typer.Option("default", help="Dataset name for the default store path."),
    seed: int = typer.Option(0, help="Base episode seed."),
    data_dir: Optional[Path] = DataDirOption,
) -> None:
    """Render episodes into a Zarr store, embed them, build the FAISS cache, summarise reward quality."""
    import os

    from pipeline.render_and_embed import RenderAndEmbedConfig, format_summary, render_and_embed
    from rmtl.provenance import DATA_DIR_ENV

    if data_dir is not None:
        os.environ[DATA_DIR_ENV] = str(data_dir)
    cfg = RenderAndEmbedConfig.make(
        store=store, name=name, episodes=episodes, policy=policy, noise_std=noise_std,
        stages=_int_list(stages, "stages"), views=views, resolution=resolution, model=model,
        batch_size=batch_size, workers=workers, dask_address=dask_address, seed=seed,
    )
    typer.echo(format_summary(render_and_embed(cfg)))


@app.command(
    "train-reward-vlm",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)
def train_reward_vlm_cmd(ctx: typer.Context) -> None:
    """Train the domain reward VLM (options: rmtl train-reward-vlm --help)."""
    from pipeline.train_vlm import main as train_main

    train_main(list(ctx.args))


def _int_list(text: str, what: str) -> list[int]:
    from rmtl.errors import ConfigError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; user errors print one line and exit with status 2."""
    try:
        app(args=argv, standalone_mode=False)
    except RmtlError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
    except (typer.Exit, SystemExit) as ex:
        code = getattr(ex, "exit_code", getattr(ex, "code", 0))
        sys.exit(code)
    except Exception as err:  # click usage errors
        import click

        if isinstance(err, click.exceptions.ClickException):
            err.show()
            sys.exit(err.exit_code)
        if isinstance(err, click.exceptions.Abort):
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()

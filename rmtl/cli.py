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

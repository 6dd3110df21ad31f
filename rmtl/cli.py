"""The ``rmtl`` command. Each group lives with the package that owns the work; this
module only wires them together. Every way a command can end goes through
:mod:`rmtl.console` (one error line and status 2, 130 for Ctrl-C; docs/errors.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from rmtl.command_config import config_command
from rmtl.commands import (
    EnvCheckConfig,
    EnvPreviewConfig,
    StoreVerifyConfig,
    env_check,
    env_preview,
    store_verify,
)
from rmtl.console import exit_code, finish
from rmtl.errors import RmtlError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="RMTL: phased multi-view VLM rewards for Fetch.")
env_app = typer.Typer(no_args_is_help=True, help="The Fetch pick-and-lift environment.")
app.add_typer(env_app, name="env")
from rmtl.train import cli as train_cli  # noqa: E402  (cheap: no torch)
from rmtl.train.cli import eval_cmd, report_cmd, train_app  # noqa: E402

app.add_typer(train_app, name="train")
app.command("eval")(eval_cmd)
app.command("report")(report_cmd)
server_app = typer.Typer(no_args_is_help=True, help="A local Prefect server (PREFECT_HOME under the data dir).")
app.add_typer(server_app, name="server")
store_app = typer.Typer(no_args_is_help=True, help="Dataset stores: check their integrity.")
app.add_typer(store_app, name="store")

DataDirOption = typer.Option(None, "--data-dir", help="Data directory (default $RMTL_DATA_DIR or ./data).")


env_app.command("preview")(config_command(EnvPreviewConfig, env_preview))
env_app.command("check")(config_command(EnvCheckConfig, env_check))
store_app.command("verify")(config_command(StoreVerifyConfig, store_verify, positional=("store",)))


def _render_and_embed_command():
    """``rmtl render-and-embed``: options generated from RenderAndEmbedConfig (rmtl.command_config)."""
    from pipeline.render_and_embed import RenderAndEmbedConfig
    from rmtl.command_config import config_command, option

    return config_command(RenderAndEmbedConfig, _render_and_embed, extra=[
        option("prefect", bool, typer.Option(False, "--prefect", help="Run as the 'render-and-embed/default' "
                                             "deployment on a local Prefect server.")),
        option("data_dir", Optional[str], DataDirOption),  # str: typer would turn '' into '.'
    ])


def _render_and_embed(cfg: Any, prefect: bool = False, data_dir: Optional[str] = None) -> None:
    """Render episodes into a Zarr store, embed them, build the FAISS cache, summarise reward quality."""
    import os

    from pipeline.render_and_embed import format_summary, preflight, render_and_embed
    from rmtl.provenance import DATA_DIR_ENV, data_dir as resolve_data_dir

    if data_dir is not None:
        os.environ[DATA_DIR_ENV] = str(resolve_data_dir(data_dir))
    if prefect:
        preflight(cfg)  # the store path and settings, before a server and a model are started
        from flows.local import render_and_embed_deployment

        run, summary = render_and_embed_deployment(cfg)
        if summary is None:
            raise RmtlError(f"flow run did not complete: {getattr(run, 'state_message', run)}")
        typer.echo(format_summary(summary))
        return
    typer.echo(format_summary(render_and_embed(cfg)))


@server_app.command("stop")
def server_stop() -> None:
    """Stop the background Prefect server."""
    from flows.server import stop_background

    typer.echo("stopped" if stop_background() else "no server was running")


@server_app.command("status")
def server_status_cmd() -> None:
    """Show the background Prefect server, if any."""
    from flows.server import server_status

    info = server_status()
    typer.echo(json.dumps(info, indent=2) if info else "not running")


export_app = typer.Typer(no_args_is_help=True, help="Export a dataset store to other formats.")
app.add_typer(export_app, name="export")


def _serve_command():
    from flows.serve import serve_command

    return serve_command()


def _server_start_command():
    from flows.server import server_start_command

    return server_start_command()


def _sweep_command():
    from flows.sweep import sweep_command

    return sweep_command()


def _train_vlm_command():
    from pipeline.train_vlm import train_vlm_command

    return train_vlm_command()


LAZY_COMMANDS = {
    ("render-and-embed",): (_render_and_embed_command, "Render episodes into a Zarr store, embed them, build the "
                                                       "FAISS cache, summarise reward quality."),
    ("train-reward-vlm",): (_train_vlm_command, "Train the domain reward VLM."),
    ("serve",): (_serve_command, "Serve the flows as deployments."),
    ("sweep",): (_sweep_command, "Run a sweep file's training runs on Prefect work pools (or --local)."),
    ("server", "start"): (_server_start_command, "Start a background Prefect server and print the settings clients need."),
    ("train", "stage1"): (train_cli.stage1_command, "Train the Stage-1 PPO worker (paper Table 1)."),
    ("train", "stage2"): (train_cli.stage2_command, "Train the Stage-2 manager over a Stage-1 worker (paper Table 2)."),
}
"""Commands whose options are generated from their config class (rmtl.command_config) when
they run: their config classes import the VLM stack or Prefect, which other commands skip."""


def command_group() -> Any:
    """The click group of ``rmtl``, generated commands included."""
    from pipeline.analysis_commands import COMMANDS
    from rmtl.command_config import config_command, lazy_command

    cmd = typer.main.get_command(app)
    for path, (load, short_help) in LAZY_COMMANDS.items():
        group = cmd
        for part in path[:-1]:
            group = group.commands[part]
        group.add_command(lazy_command(path[-1], load, short_help))
    for path, (cls, run_it, positional) in COMMANDS.items():
        group = cmd
        for part in path[:-1]:
            group = group.commands[part]
        short = (run_it.__doc__ or "").strip().split("\n")[0]
        group.add_command(lazy_command(path[-1], lambda cls=cls, run_it=run_it, positional=positional: config_command(
            cls, run_it, positional=positional), short))
    return cmd


def _invoke(argv: list[str] | None) -> Any:
    """Parse and run one command line; exceptions are left to :func:`rmtl.console.exit_code`
    (typer's own standalone handling would turn Ctrl-C and ``typer.Exit`` into return
    values and usage errors into multi-line panels)."""
    cmd = command_group()
    args = sys.argv[1:] if argv is None else list(argv)
    with cmd.make_context("rmtl", args) as ctx:
        return cmd.invoke(ctx)


def run(argv: list[str] | None = None) -> int:
    """Run ``rmtl ARGV`` in this process and return its exit status (errors: one line on stderr)."""
    return exit_code(_invoke, argv)


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point: run the command and exit with its status (docs/errors.md)."""
    finish(run(argv))


if __name__ == "__main__":
    main()

"""The ``rmtl`` command: finds the command its words name in :data:`rmtl.command_table.COMMANDS`
and runs it (options from its config class, rmtl.config_cli). Every way a command can end
goes through :mod:`rmtl.console` (one error line and status 2, 130 for Ctrl-C; docs/errors.md)."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from pydantic import Field

from rmtl.command_table import COMMANDS, GROUPS
from rmtl.config import Config
from rmtl.config_cli import run_command
from rmtl.console import exit_code, finish, report
from rmtl.errors import ConfigError, RmtlError

PROG = "rmtl"
DESCRIPTION = "RMTL: phased multi-view VLM rewards for Fetch."


def _listing(words: tuple[str, ...]) -> str:
    """The help of ``rmtl WORDS``: the commands and groups one word below it."""
    below: dict[str, str] = {}
    for path, command in COMMANDS.items():
        parts = tuple(path.split())
        if parts[:len(words)] == words and len(parts) > len(words):
            nxt = parts[len(words)]
            below.setdefault(nxt, command.help if len(parts) == len(words) + 1 else GROUPS.get(nxt, ""))
    title = GROUPS.get(words[-1], "") if words else DESCRIPTION
    width = max(map(len, below)) + 2
    lines = [f"usage: {' '.join((PROG, *words))} COMMAND [OPTIONS]", "", title, "", "commands:"]
    lines += [f"  {name:<{width}}{text}" for name, text in sorted(below.items())]
    lines += ["", f"'{' '.join((PROG, *words))} COMMAND --help' shows a command's options."]
    return "\n".join(lines)


def _invoke(argv: list[str]) -> Any:
    words: tuple[str, ...] = ()
    for i, token in enumerate(argv):
        if token.startswith("-") or (" ".join((*words, token)) not in COMMANDS and (words or token not in GROUPS)):
            break
        words = (*words, token)
        longer = i + 1 < len(argv) and " ".join((*words, argv[i + 1])) in COMMANDS  # 'qualify fit-map' over 'qualify'
        if " ".join(words) in COMMANDS and not longer:
            return run_command(COMMANDS[" ".join(words)], argv[len(words):], " ".join((PROG, *words)))
    rest = argv[len(words):]
    if rest and rest[0] in ("-h", "--help"):
        print(_listing(words))
        return 0
    path = " ".join((PROG, *words))
    if rest:
        raise ConfigError(f"No such command '{rest[0]}'; see '{path} --help'")
    print(_listing(words))
    report(f"missing command; choose one of those listed above ('{path} --help')")
    return 2


def run(argv: list[str] | None = None) -> int:
    """Run ``rmtl ARGV`` in this process and return its exit status (errors: one line on stderr)."""
    return exit_code(_invoke, sys.argv[1:] if argv is None else list(argv))


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point: run the command and exit with its status (docs/errors.md)."""
    finish(run(argv))


# ------------------------------------------------------------------ rmtl render-and-embed
class RenderAndEmbedOptions(Config):
    """How ``rmtl render-and-embed`` runs (not part of the job's config)."""

    prefect: bool = False
    """Run as the 'render-and-embed/default' deployment on a local Prefect server."""
    data_dir: str | None = Field(None)
    """Data directory (default $RMTL_DATA_DIR or ./data)."""


def render_and_embed(cfg: Any, options: RenderAndEmbedOptions) -> None:
    """Render episodes into a Zarr store, embed them, build the FAISS cache, summarise reward quality."""
    import os

    from pipeline.jobs.render_and_embed import format_summary, preflight, render_and_embed as run_job
    from rmtl.provenance import DATA_DIR_ENV, data_dir as resolve_data_dir

    if options.data_dir is not None:
        os.environ[DATA_DIR_ENV] = str(resolve_data_dir(options.data_dir))
    if options.prefect:
        preflight(cfg)  # the store path and settings, before a server and a model are started
        from flows.local import render_and_embed_deployment

        flow_run, summary = render_and_embed_deployment(cfg)
        if summary is None:
            raise RmtlError(f"flow run did not complete: {getattr(flow_run, 'state_message', flow_run)}")
        print(format_summary(summary))
        return
    print(format_summary(run_job(cfg)))


if __name__ == "__main__":
    main()

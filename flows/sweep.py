"""``rmtl sweep FILE``: a sweep file's runs through Prefect work-pool deployments, or ``--local``.

Nothing here imports Prefect at module level: the file is checked and the Prefect settings are
in place (:func:`prefect_settings`) before Prefect is imported by :mod:`flows.train`.
"""

from __future__ import annotations

import os
from typing import Annotated

import tyro
from pydantic import Field

from rmtl.config import Config
from rmtl.errors import ConfigError, RmtlError
from rmtl.train.sweep import plan, run_local
from rmtl.train.sweep_file import load_sweep


def prefect_settings(api_url: str | None) -> str:
    """Put the project's Prefect settings in this process's environment (before Prefect reads
    them) and return the API URL; one line without one, or when nothing answers there."""
    from flows.prefect_settings import base_settings, is_healthy

    url = api_url or os.environ.get("PREFECT_API_URL")
    if not url:
        raise ConfigError("no Prefect API for the sweep: start one (rmtl server start) and export PREFECT_API_URL, "
                          "or pass --api-url URL; or run it on this machine without a server: rmtl sweep FILE --local")
    for k, v in base_settings(os.environ.get("PREFECT_HOME")).items():
        os.environ.setdefault(k, v)
    os.makedirs(os.environ["PREFECT_HOME"], exist_ok=True)
    os.environ["PREFECT_API_URL"] = url
    if not is_healthy(url, timeout=5):
        raise RmtlError(f"no Prefect API answers at {url}; start it (rmtl server start) or fix PREFECT_API_URL")
    return url


class SweepConfig(Config):
    """``rmtl sweep FILE``: the runs of a sweep file through Prefect deployments (or ``--local``)."""

    file: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="FILE")]
    """Sweep file (YAML): output_root, steps, set, runs (docs/flows.md)."""
    local: bool = False
    """Run every run here, in order, without a Prefect server."""
    api_url: str | None = None
    """Prefect API URL (default PREFECT_API_URL)."""
    dry_run: bool = False
    """Print each run and its state (finished, resumable, new) and stop."""
    poll: float = Field(5.0, gt=0)
    """Seconds between checks of the submitted flow runs."""


def sweep(cfg: SweepConfig) -> None:
    """Run a sweep file's training runs (one deployment run each, or --local in order), skipping
    finished runs and resuming unfinished ones, then write the report of all of them."""
    spec = load_sweep(cfg.file)  # every check before a server is asked or a run starts
    if cfg.dry_run:
        for r, state in plan(spec):
            print(f"{state:9s} {r.name}  -> {r.output_dir}")
        print(f"{len(spec.runs)} runs; report -> {spec.report_dir}")
        return
    if cfg.local:
        out = run_local(spec, echo=print)
    else:
        prefect_settings(cfg.api_url)
        from flows.train import run_sweep

        out = run_sweep(spec, poll=cfg.poll, echo=print)
    print(f"report of {len(spec.runs)} runs: {out}")

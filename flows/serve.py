"""Serve the project's flows as deployments (``python -m flows.serve``).

Each flow gets a deployment named ``default`` (or ``--name``), so with a Prefect API
reachable through ``PREFECT_API_URL`` (``python -m flows.server start`` for a local one):

    python -m flows.serve &
    prefect deployment run 'render-and-embed/default' --param 'config={"episodes": 2}' --watch

Every flow takes one parameter, ``config``: its job's config class as JSON (the fields left
out take their defaults; flows.analysis, flows.render_and_embed).

The serving process polls the API for scheduled runs of its deployments and executes
each in a subprocess. It must run where the data and the models are (or where the store
URLs and Dask address in the parameters are reachable). For work pools and workers on
other machines use ``prefect deploy`` with the same flow entrypoints (docs/flows.md).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from pydantic import Field

from rmtl.config import Config

DEFAULT_DEPLOYMENT = "default"
FLOW_ENTRYPOINTS = {
    "render-and-embed": "flows.render_and_embed:render_and_embed_flow",
    "alpha-sweep": "flows.analysis:alpha_sweep_flow",
    "per-view-analysis": "flows.analysis:per_view_analysis_flow",
    "bc-labels": "flows.analysis:bc_labels_flow",
}
"""Flow name -> ``module:attribute``. Flows whose module is not importable are skipped."""


def load_flows(names: list[str] | None = None) -> dict[str, Any]:
    """The available flows by name (all known ones, or ``names``; an unknown name fails)."""
    from rmtl.errors import ConfigError

    wanted = names or list(FLOW_ENTRYPOINTS)
    unknown = [n for n in wanted if n not in FLOW_ENTRYPOINTS]
    if unknown:
        raise ConfigError(f"unknown flow {unknown[0]!r}; choose from {', '.join(FLOW_ENTRYPOINTS)}")
    out = {}
    for name in wanted:
        module, attr = FLOW_ENTRYPOINTS[name].split(":")
        try:
            out[name] = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            if names:  # asked for by name: say why it is missing
                raise ConfigError(f"flow {name!r} is not available ({FLOW_ENTRYPOINTS[name]} does not import)") from None
    return out


def deployments(name: str = DEFAULT_DEPLOYMENT, flows: list[str] | None = None,
                parameters: dict[str, dict] | None = None) -> list:
    """RunnerDeployments of the flows, each named ``name``; ``parameters`` overrides the
    default parameters per flow name (``{"config": {...}}``; a run's ``--param`` still wins)."""
    from prefect.deployments.runner import EntrypointType

    out = []
    for flow_name, fl in load_flows(flows).items():
        out.append(fl.to_deployment(
            name=name, parameters=(parameters or {}).get(flow_name),
            entrypoint_type=EntrypointType.MODULE_PATH,  # importable from any working directory
            tags=["rmtl"], description=fl.description))
    return out


def serve(name: str = DEFAULT_DEPLOYMENT, flows: list[str] | None = None, limit: int | None = None) -> None:
    """Register the deployments with the API and execute their runs until interrupted."""
    import prefect
    from prefect.settings import PREFECT_API_URL

    from rmtl.errors import ConfigError

    if not PREFECT_API_URL.value():
        raise ConfigError("no Prefect API to serve to: start one (python -m flows.server start, or rmtl server start) "
                          "and set PREFECT_API_URL, or pass --api-url")
    prefect.serve(*deployments(name, flows), limit=limit)


class ServeConfig(Config):
    """What ``python -m flows.serve`` (``rmtl serve``) serves."""

    name: str = DEFAULT_DEPLOYMENT
    """Deployment name of every flow."""
    flows: tuple[str, ...] | None = None
    """Serve only these flows (default: all of FLOW_ENTRYPOINTS)."""
    limit: int | None = Field(None, ge=1)
    """Most flow runs at once."""
    api_url: str | None = None
    """Prefect API URL (default: PREFECT_API_URL)."""


def serve_from_config(cfg: ServeConfig) -> None:
    """Serve the rmtl flows as deployments."""
    # settings first, before Prefect is imported (it reads them once)
    from flows.prefect_settings import base_settings

    for k, v in base_settings(os.environ.get("PREFECT_HOME")).items():
        os.environ.setdefault(k, v)
    os.makedirs(os.environ["PREFECT_HOME"], exist_ok=True)
    if cfg.api_url:
        os.environ["PREFECT_API_URL"] = cfg.api_url
    flows = list(cfg.flows) if cfg.flows else None
    load_flows(flows)  # an unknown flow fails before Prefect starts
    serve(cfg.name, flows, cfg.limit)


def main(argv: list[str] | None = None, prog: str = "python -m flows.serve") -> int:
    """``python -m flows.serve [--name N] [--flow F] ...``; returns the exit status (errors:
    one line on stderr, 130 after Ctrl-C; rmtl.console)."""
    from rmtl.command_table import COMMANDS
    from rmtl.config_cli import run_standalone

    return run_standalone(COMMANDS["serve"], argv, prog)


if __name__ == "__main__":
    from rmtl.console import finish

    finish(main())

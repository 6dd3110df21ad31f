"""One config per job: its ``rmtl`` command, its Prefect flow and its Python entry take the same
class, so an option added to that class reaches all three and they cannot drift apart."""

from __future__ import annotations

import inspect
import json
import re
import typing

import pytest

from rmtl.command_table import COMMANDS
from rmtl.config_cli import load, parse

JOBS = {
    "alpha-sweep": ("flows.analysis:alpha_sweep_flow", "pipeline.analyses.alpha_sweep:run"),
    "per-view-analysis": ("flows.analysis:per_view_analysis_flow", "pipeline.analyses.per_view:run"),
    "bc-labels": ("flows.analysis:bc_labels_flow", "pipeline.export.bc_labels:run"),
    "render-and-embed": ("flows.render_and_embed:render_and_embed_flow", "pipeline.jobs.render_and_embed:render_and_embed"),
}
"""Command words -> (flow, Python entry taking the config)."""


def _cli_fields(job: str, capsys) -> set[str]:
    """The fields behind the options ``rmtl JOB --help`` lists (the command's own options aside)."""
    command = COMMANDS[job]
    with pytest.raises(SystemExit) as done:
        parse(command, ["--help"], f"rmtl {job}")
    assert done.value.code == 0
    flags = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9.-]*)", capsys.readouterr().out))
    own = {"help", "config", "set", *(a[2:] for a in command.aliases)}
    if command.options:
        own |= {n.replace("_", "-") for n in load(command.options).model_fields}
    return {f.split(".")[0].replace("-", "_") for f in flags if f not in own and not f.startswith("no-")}


@pytest.mark.parametrize("job", JOBS)
def test_command_flow_and_python_entry_take_one_config_class(job, capsys, monkeypatch):
    from prefect.utilities.callables import parameter_schema

    monkeypatch.setenv("COLUMNS", "400")
    cls = load(COMMANDS[job].config)
    flow_path, entry_path = JOBS[job]
    fl, entry = load(flow_path), load(entry_path)

    # the flow: one parameter, ``config``, annotated with the command's class, with its schema
    params = inspect.signature(fl.fn).parameters
    assert list(params) == ["config"], f"{flow_path} must take only the config: {list(params)}"
    assert typing.get_type_hints(fl.fn)["config"] is cls
    schema = parameter_schema(fl.fn)
    assert set(schema.properties) == {"config"}
    assert set(schema.definitions[cls.__name__]["properties"]) == set(cls.model_fields)

    # the Python entry: the same class
    first = next(iter(inspect.signature(entry).parameters))
    assert typing.get_type_hints(entry)[first] is cls

    # the command line: one option per field, no other
    assert _cli_fields(job, capsys) == set(cls.model_fields)


@pytest.mark.parametrize("job", JOBS)
def test_a_command_lines_config_is_the_flows_parameter(job):
    """What a deployment run gets (JSON) is built back into the config the command line made."""
    from flows.common import as_config, flow_parameters

    argv = {"alpha-sweep": ["--store", "s.zarr", "--alphas", "0,0.5", "--bins", "5", "--no-plots"],
            "per-view-analysis": ["--name", "x", "--episodes", "1,2", "--alpha", "0.5", "--no-plots"],
            "bc-labels": ["--out", "bc.zarr", "--episodes", "3", "--chunk", "1"],
            "render-and-embed": ["--episodes", "2", "--views", "wide_view,close_up", "--resolution", "64"]}[job]
    command = COMMANDS[job]
    cfg, _ = parse(command, argv, f"rmtl {job}")
    cls = load(command.config)
    sent = json.loads(json.dumps(flow_parameters(cfg)))
    assert list(sent) == ["config"] and as_config(cls, sent["config"]) == cfg


STEPS = {  # job -> (module, the keyword function its run() calls, config field -> that function's argument)
    "alpha-sweep": ("pipeline.analyses.alpha_sweep", "alpha_sweep", {"model": "model_id", "out": "out_dir"}),
    "per-view-analysis": ("pipeline.analyses.per_view", "per_view_analysis", {"model": "model_id", "out": "out_dir"}),
    "bc-labels": ("pipeline.export.bc_labels", "bc_labels", {}),
}


@pytest.mark.parametrize("job", STEPS)
def test_the_python_entry_passes_every_field_on(job, monkeypatch):
    """A field the step's ``run`` does not hand to the step fails here (store and name: the store path)."""
    import importlib

    module_name, fn_name, renamed = STEPS[job]
    module = importlib.import_module(module_name)
    fn = getattr(module, fn_name)
    calls = []
    monkeypatch.setattr(module, fn_name, lambda *a, **k: calls.append(inspect.signature(fn).bind(*a, **k)))
    if hasattr(module, "prompt_set_of"):
        monkeypatch.setattr(module, "prompt_set_of", lambda p: p)
    cls = load(COMMANDS[job].config)
    cfg = cls.make(store="/s.zarr")
    module.run(cfg)
    got = calls[0].arguments
    first = next(iter(inspect.signature(fn).parameters))
    assert got.pop(first) == cfg.store_path()
    for field in set(cls.model_fields) - {"store", "name"}:
        arg = renamed.get(field, field)
        assert arg in got, f"{module_name}.run does not pass {field} on"
        value = getattr(cfg, field)
        assert got[arg] == value or (not value and got[arg] is None), (field, got[arg], value)


def test_every_pipeline_command_takes_a_config_kept_beside_its_step():
    """A command over stored data reads its options from a class in its step's own module (the
    command glue, pipeline.commands, holds none)."""
    for words, command in COMMANDS.items():
        module = command.config.split(":")[0]
        if not module.startswith("pipeline."):
            continue
        assert module != "pipeline.commands", f"{words}: config class in the command glue"
        assert isinstance(load(command.config), type), f"{words}: {command.config} is not a class"

"""One way from a config class to a command: the options of every configurable command are
generated here from its :class:`~rmtl.config.Config` class.

A command made by :func:`config_command` takes

- ``--config FILE``: a YAML file of the config's fields (what ``Config.to_yaml`` writes);
- one option per field (``--noise-std 0.2``; booleans as ``--flag/--no-flag`` pairs, or
  taking a value, ``--keep-best false``, for commands that always took one; tuples as comma
  lists ``--stages 0,1``, and a repeated option adds to the list (``--checkpoint A
  --checkpoint B`` is ``--checkpoint A,B``); nested configs as a JSON/YAML mapping ``--render '{...}'``), with
  the field's docstring as help and its bounds as the option's range;
- aliases: short names for long or nested fields (``--steps`` for
  ``total_timesteps``, ``--model`` for ``reward.model``; for a boolean, a flag pair);
- ``--set a.b=value`` (repeatable) for any field, nested ones included.

Later sources win: field defaults, then the file, then the options, then ``--set``. Bad
input fails with one line (ConfigError, or the option parser's usage line; rmtl.console).
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import typer
import yaml
from annotated_types import Ge, Le
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from rmtl.config import Config, deep_merge, nest_dotted, parse_overrides, read_yaml_mapping
from rmtl.errors import ConfigError

CONFIG_PARAM = "config_file"
SET_PARAM = "set_"


def read_config_file(path: Path | None) -> dict[str, Any]:
    """The mapping in a ``--config`` YAML file ({} without one); one line if it is not one."""
    return {} if path is None else read_yaml_mapping(path)


def _field_at(cls: type[BaseModel], dotted: str) -> FieldInfo:
    node: Any = cls
    field = None
    for part in dotted.split("."):
        field = node.model_fields[part]
        # A field typed by a base class (Stage1Config.reward, one config per reward kind): the default's class.
        node = type(field.default) if isinstance(field.default, BaseModel) else _plain(field.annotation)
    assert field is not None
    return field


def _plain(annotation: Any) -> Any:
    """``X`` of ``Optional[X]`` / ``X | None`` / ``Annotated[X, ...]`` (other annotations unchanged)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _plain(typing.get_args(annotation)[0])
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _plain(args[0])
    return annotation


def _number(kind: type) -> Callable[[str], Any]:
    """Parser of an optional number: the word 'none', or a valid integer / number."""
    def parse(text: str) -> Any:
        if text.lower() == "none":
            return _NONE_GIVEN
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a valid {'integer' if kind is int else 'number'} (or none)") from None

    return parse


_UNSET = object()
"""An option not given (None can be a value: ``--target-prompt-rate none``)."""

_BOOL_WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


def _flat(items: list) -> list:
    return [x for i in items for x in (i if isinstance(i, tuple) else (i,))]


class _NoneGiven:
    """The word 'none' given to an option whose field allows None."""


_NONE_GIVEN = _NoneGiven()


def _boolean(text: str) -> bool:
    if text.lower() not in _BOOL_WORDS:
        raise ValueError(f"{text!r} is not true or false")
    return _BOOL_WORDS[text.lower()]


class _Kind:
    """How one field is given on the command line and turned into a config value."""

    def __init__(self, field: FieldInfo, switch: bool = False):
        self.field = field
        ann = _plain(field.annotation)
        self.ann = ann
        self.switch = switch and ann is bool
        """A ``--flag/--no-flag`` pair (else a boolean takes a value: ``--flag false``)."""
        optional = self.optional = type(None) in typing.get_args(field.annotation)
        self.nested = inspect.isclass(ann) and issubclass(ann, BaseModel)
        self.sequence = typing.get_origin(ann) in (tuple, list)
        item = (typing.get_args(ann) or (str,))[0] if self.sequence else None
        self.item = item if item in (int, float) else str
        metadata = [*field.metadata, *(getattr(a, "__metadata__", ()) for a in typing.get_args(field.annotation))]
        self.raw_text = self.sequence and any(callable(getattr(m, "func", None)) for m in _flat(metadata))
        """A sequence with its own text validator (e.g. view names: 'all' or a comma list)."""
        self.parser: Callable[[str], Any] | None = None
        """Parses the option's text (its errors are usage errors naming the option)."""
        self.cli_type: Any = str
        if ann is bool and not self.switch:
            self.parser = _boolean
        elif ann is bool:
            self.cli_type = bool
        elif ann in (int, float) and optional:
            self.parser = _number(ann)
        elif ann in (int, float):
            self.cli_type = ann
        elif self.sequence:
            self.cli_type = list[str]  # repeatable: every occurrence adds to the comma list

    def option(self, flag: str) -> Any:
        lo = next((m.ge for m in self.field.metadata if isinstance(m, Ge)), None)
        hi = next((m.le for m in self.field.metadata if isinstance(m, Le)), None)
        help_text = (self.field.description or "").split("\n")[0] or None
        if self.switch:
            return typer.Option(None, f"--{flag}/--no-{flag}", help=help_text, show_default=False)
        if self.parser is not None:
            return typer.Option(None, f"--{flag}", help=help_text, show_default=False, parser=self.parser)
        ranged = {"min": lo, "max": hi} if self.cli_type in (int, float) else {}
        return typer.Option(None, f"--{flag}", help=help_text, show_default=False, **ranged)

    def argument(self) -> Any:
        help_text = (self.field.description or "").split("\n")[0] or None
        return typer.Argument(None, help=help_text, show_default=False)

    def value(self, given: Any, flag: str, positional: bool = False) -> Any:
        if given is None or (isinstance(given, list) and not given):
            return _UNSET
        if isinstance(given, list) and positional:  # a positional argument taking several values
            return given
        if isinstance(given, list):  # a repeated option: --x a --x b,c is --x a,b,c
            given = ",".join(str(g) for g in given)
        if (self.sequence or self.nested) and str(given).lower() == "none" and self.optional:
            return None
        if given is _NONE_GIVEN:
            return None
        if self.nested:
            try:
                value = yaml.safe_load(given)
            except yaml.YAMLError:
                value = None
            if not isinstance(value, dict):
                raise ConfigError(f"--{flag} must be a JSON object such as '{{\"name\": value}}', got {given!r}")
            return value
        if self.sequence and not self.raw_text:
            parts = [p.strip() for p in str(given).split(",") if p.strip()]
            if self.item in (int, float):
                try:
                    return [self.item(p) for p in parts]
                except ValueError:
                    what = "integers" if self.item is int else "numbers"
                    raise ConfigError(f"--{flag} must be comma-separated {what}, got {given!r}") from None
            return parts
        return given


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    return nest_dotted({dotted: value})


def config_command(
    cls: type[Config],
    run: Callable[..., Any],
    *,
    arguments: Sequence[inspect.Parameter] = (),
    extra: Sequence[inspect.Parameter] = (),
    aliases: Mapping[str, str] | None = None,
    exclude: Iterable[str] = (),
    build: Callable[[dict[str, Any], dict[str, Any]], Config] | None = None,
    doc: str | None = None,
    switches: bool = True,
    positional: Sequence[str] = (),
) -> Callable[..., Any]:
    """A typer command function for ``cls`` that calls ``run(config, **extras)``.

    arguments / extra: further typer parameters (positional arguments first, options after
    the generated ones) passed to ``run`` by name. aliases: ``{flag: dotted field}``.
    exclude: fields left out of the generated options (still settable by file or --set).
    build(file_values, cli_values) -> config replaces ``cls.make(**merged)`` (e.g. to apply
    a named variant between the two). switches: booleans as flag pairs (False: they take a
    value, ``--flag true``). positional: fields given as positional arguments instead.
    """
    aliases = dict(aliases or {})
    skip = set(exclude)
    kinds: dict[str, tuple[str, str, _Kind]] = {}  # param name -> (flag, dotted field, kind)
    for name, field in cls.model_fields.items():
        if name in skip:
            continue
        flag = name.replace("_", "-")
        kinds[f"f_{name}"] = (flag, name, _Kind(field, switch=switches))
    for flag, dotted in aliases.items():
        kinds[f"a_{flag.replace('-', '_')}"] = (flag, dotted, _Kind(_field_at(cls, dotted), switch=True))
    args = {f"f_{name}" for name in positional}
    taken = {flag for flag, _, _ in kinds.values()}
    clashes = sorted(taken & {p.name.replace("_", "-") for p in (*arguments, *extra)})
    if clashes:
        raise ValueError(f"{cls.__name__}: extra parameters clash with generated options {clashes}")

    def command(**params: Any) -> Any:
        file_values = read_config_file(params.pop(CONFIG_PARAM))
        cli: dict[str, Any] = {}
        set_by: dict[str, str] = {}  # dotted field -> the flag that set it
        for pname, (flag, dotted, kind) in kinds.items():
            value = kind.value(params.pop(pname), flag, positional=pname in args)
            if value is not _UNSET:
                if dotted in set_by:  # an alias and its field: one name per field on one command line
                    raise ConfigError(f"--{set_by[dotted]} and --{flag} both set {dotted}; give only one of them")
                set_by[dotted] = flag
                cli = deep_merge(cli, _nest(dotted, value))
        cli = deep_merge(cli, parse_overrides(params.pop(SET_PARAM) or []))
        for name, field in cls.model_fields.items():
            if field.is_required() and name not in file_values and name not in cli:
                from typer._click.exceptions import UsageError
                from typer._click.globals import get_current_context

                what = f"argument '{name.upper()}'" if name in positional else f"option '--{name.replace('_', '-')}'"
                raise UsageError(f"Missing {what} (or a --config file that sets {name})", get_current_context(silent=True))
        config = build(file_values, cli) if build is not None else cls.make(**deep_merge(file_values, cli))
        return run(config, **params)

    generated = [inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=kind.option(flag),
                                   annotation=Any if kind.parser else Optional[kind.cli_type])
                 for pname, (flag, _, kind) in kinds.items() if pname not in args]
    field_args = [inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=kind.argument(),
                                    annotation=Optional[list[str]] if kind.sequence else Optional[str])
                  for pname, (_, _, kind) in kinds.items() if pname in args]
    common = [
        inspect.Parameter(CONFIG_PARAM, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[Path],
                          default=typer.Option(None, "--config", help=f"YAML file of {cls.__name__} fields.")),
        inspect.Parameter(SET_PARAM, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[list[str]],
                          default=typer.Option(None, "--set", help="Set any field: key.sub=value (repeatable).")),
    ]
    leading = [*field_args, *(p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in arguments)]
    keyword = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in (*common, *generated, *extra)]
    params = leading + keyword
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = doc or run.__doc__
    command.__name__ = getattr(run, "__name__", "command")
    return command


def option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    """An extra typer parameter for :func:`config_command` (``default``: a typer.Option/Argument)."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def lazy_command(name: str, load: Callable[[], Callable[..., Any]], short_help: str) -> Any:
    """A click command that builds the typer command ``load()`` returns on first use, so
    commands whose config classes import torch cost nothing until they run (or show --help)."""
    from typer.core import TyperCommand

    class LazyCommand(TyperCommand):
        def __init__(self) -> None:
            super().__init__(name, short_help=short_help, help=short_help)
            self._real: Any = None

        def real(self) -> Any:
            if self._real is None:
                app = typer.Typer(add_completion=False)
                app.command(name)(load())
                self._real = typer.main.get_command(app)
            return self._real

        def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
            return self.real().make_context(info_name, args, parent=parent, **extra)

    return LazyCommand()


def invoke(command: Callable[..., Any], argv: Sequence[str], prog: str) -> Any:
    """Parse ``argv`` for one generated command and return what its ``run`` returns
    (exceptions propagate: wrap in rmtl.console.exit_code for one-line errors)."""
    app = typer.Typer(add_completion=False)
    app.command()(command)
    cmd = typer.main.get_command(app)
    with cmd.make_context(prog, list(argv)) as ctx:
        return cmd.invoke(ctx)


def run_standalone(command: Callable[..., Any], argv: Sequence[str] | None, prog: str) -> int:
    """Run one generated command as its own program (``python -m ...``); the exit status,
    errors as one line (rmtl.console)."""
    import sys

    from rmtl.console import exit_code

    return exit_code(invoke, command, sys.argv[1:] if argv is None else list(argv), prog)

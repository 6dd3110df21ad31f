"""A command line to a config, by tyro: the options of every command are generated from its
:class:`~rmtl.config.Config` class (field docstrings as help, ``--a.b`` for nested fields).

Besides the fields, every command takes

- ``--config FILE``: a YAML file of the config's fields (what ``Config.to_yaml`` writes);
- ``--set a.b=value`` (repeatable): any field, nested ones and dict entries included;
- the short names its table entry lists (``--steps`` for ``--total-timesteps``).

Later sources win: field defaults, the file, the flags, then ``--set``. The file and ``--set``
(and the command's preset flags, e.g. ``--variant``) are also read before tyro builds the
options, so their values are the options' defaults and a reward ``kind`` they choose brings
that kind's fields. Tyro only reads the flags; the config is built from the given values
alone (field defaults stay out, so a config's own rules, such as a model's declared renderer,
see what the user gave) and validated by pydantic. Every bad input ends as one
:class:`~rmtl.errors.ConfigError` line (rmtl.console).
"""

import dataclasses
import difflib
import importlib
import re
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import tyro
from tyro.constructors import (
    ConstructorRegistry,
    PrimitiveConstructorSpec,
    PrimitiveTypeInfo,
    StructConstructorSpec,
    StructFieldSpec,
    StructTypeInfo,
)

from rmtl.config import Config, deep_merge, parse_overrides, read_yaml_mapping
from rmtl.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Command:
    """One command: its config class, what it runs, and how its command line reads.

    ``config``, ``run``, ``options`` and ``build`` are import paths (``module:name``), imported
    only when the command runs, so listing commands imports none of their code."""

    config: str
    """The config class (``rmtl.config:Config``, which has no fields, for a command without one)."""
    run: str
    """Called with the config (and the options, when the command has them)."""
    help: str
    """One line for the command list."""
    options: str | None = None
    """A Config class of options that are not part of the config (``--fresh``, ``--out``)."""
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Short flag -> the flag it stands for (``--steps`` -> ``--total-timesteps``)."""
    presets: tuple[str, ...] = ()
    """Flags that shape the other options' defaults, read before them (``--variant``)."""
    build: str | None = None
    """``build(file_values, overrides) -> config`` instead of ``cls.make(**merged)``."""
    bool_values: bool = False
    """Booleans take a value (``--reset-text-tower false``) instead of being flag pairs."""


def load(path: str) -> Any:
    """The object at ``module:name``."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclasses.dataclass(frozen=True)
class Sources:
    """Where values come from besides the flags (read before the flags; listed here for --help)."""

    config: str | None = None
    """YAML file of the config's fields (the flags and --set win over it)."""
    set: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """Set any field: key.sub=value (repeatable; wins over everything else)."""


# ------------------------------------------------------------------ tyro's rules for rmtl
_REGISTRY = ConstructorRegistry()


@_REGISTRY.struct_rule
def _given_values(info: StructTypeInfo) -> StructConstructorSpec | None:
    """A Config is read as the mapping of the values the command line changed (nested
    configs: their own such mapping), not built: pydantic builds and checks it afterwards.

    A field typed by a base class gets the flags of its default's class: the reward kinds are
    tagged by ``kind`` but are a registry that grows as kinds register, not a union fixed
    where Stage1Config is defined, and a variant chooses a kind; so the kind is chosen by the
    defaults, ``--config``, ``--variant`` or ``--set reward.kind=K``, not by tyro subcommands."""
    cls = info.type
    if not (isinstance(cls, type) and issubclass(cls, Config)):
        return None
    base = cls
    default = info.default
    if isinstance(default, Config) and type(default) is not cls:
        cls = type(default)  # a field typed by a base class: the default's (the chosen reward kind's)
    hints = typing.get_type_hints(cls, include_extras=True)
    choices = _kind_choices(base)
    if len(choices) > 1:  # the tag lists every kind, not only the default's (it is read before the flags)
        hints["kind"] = typing.Literal[choices]  # type: ignore[valid-type]
    defaults: dict[str, Any] = {}
    fields = []
    given = default.__dict__ if isinstance(default, Config) else {}  # model_construct: required ones may lack
    for name, field in cls.model_fields.items():
        if name in given:
            value = given[name]
        elif field.is_required():
            value = tyro.MISSING_NONPROP
        else:
            value = field.get_default(call_default_factory=True)
        nested = _config_class(hints[name])
        if isinstance(value, Mapping) and nested is not None:  # a section of a file or --set, not yet built
            value = nested.model_construct(**value)
        defaults[name] = value
        fields.append(StructFieldSpec(name=name, type=hints[name], default=value, helptext=field.description))

    def changed(**values: Any) -> dict[str, Any]:
        return {k: v for k, v in values.items()
                if not (v == {} if isinstance(v, dict) else _same(v, defaults.get(k, tyro.MISSING_NONPROP)))}

    return StructConstructorSpec(instantiate=changed, fields=tuple(fields))


def _kind_choices(base: type[Config]) -> tuple[str, ...]:
    """The tags of a class family whose base has ``kind: str`` naming one of its subclasses (the
    reward kinds): every subclass's default ``kind``; () for any other class."""
    roots = [c for c in base.__mro__ if isinstance(c, type) and issubclass(c, Config)
             and "kind" in c.model_fields and c.model_fields["kind"].annotation is str]
    if not roots:
        return ()
    found, stack = set(), [roots[-1]]
    while stack:
        c = stack.pop()
        stack += c.__subclasses__()
        tag = c.model_fields["kind"].default if "kind" in c.model_fields else None
        if isinstance(tag, str) and tag:
            found.add(tag)
    return tuple(sorted(found))


def _kind_flags(cls: type[Config], argv: Sequence[str]) -> dict[str, Any]:
    """The values of flags that choose a kind (``--reward.kind K``), as nested values: read before
    the other flags (like ``--set reward.kind=K``), so the kind's own fields get their flags."""
    out: dict[str, Any] = {}
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        parts = name[2:].split(".") if name.startswith("--") else []
        if len(parts) < 2 or parts[-1] != "kind":
            continue
        owner: Any = cls
        for part in parts[:-1]:
            field = owner.model_fields.get(part.replace("-", "_")) if owner is not None else None
            owner = _config_class(field.annotation) if field is not None else None
        if owner is None or not _kind_choices(owner):
            continue
        if not eq:
            if i + 1 >= len(argv):
                continue  # tyro says it takes a value
            value = argv[i + 1]
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part.replace("-", "_"), {})
        node["kind"] = value
    return out


def _conflicting_aliases(argv: Sequence[str], aliases: Mapping[str, str]) -> None:
    """One line if a field is given under two of its names with different values (``--steps 128
    --total-timesteps 64``): neither silently wins."""
    seen: dict[str, list[tuple[str, str]]] = {}
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        off = name.startswith("--no-")
        bare = "--" + name[5:] if off else name
        target = aliases.get(bare, bare if bare in aliases.values() else None)
        if target is None:
            continue
        if off:
            value = "off"
        elif not eq:
            nxt = argv[i + 1] if i + 1 < len(argv) else "--"
            value = "on" if nxt.startswith("--") else nxt
        seen.setdefault(target, []).append((name, value))
    for target, uses in seen.items():
        for name, value in uses[1:]:
            if name != uses[0][0] and value != uses[0][1]:
                first = uses[0]
                raise ConfigError(f"{first[0]} {first[1]} and {name} {value} set the same option ({target}) to "
                                  f"different values; give it once")


def _config_class(annotation: Any) -> type[Config] | None:
    inner = typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation
    return inner if isinstance(inner, type) and issubclass(inner, Config) else None


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, Config):
        return False
    try:
        return bool(value == default) and type(value) is type(default)
    except Exception:  # noqa: BLE001  (values that do not compare: keep them)
        return False


@_REGISTRY.primitive_rule
def _comma_lists(info: PrimitiveTypeInfo) -> PrimitiveConstructorSpec | None:
    """Sequences of numbers or words: ``--stages 0,1``, ``--stages 0 1``; 'none' for None
    (an optional sequence), as the commands always took them."""
    if info.type_origin not in (tuple, list) or tyro.conf.UseAppendAction in info.markers:
        return None
    items = [a for a in typing.get_args(info.type) if a is not Ellipsis]
    if len(set(items)) != 1 or items[0] not in (int, float, str):
        return None
    item = items[0]

    def parse(tokens: list[str]) -> Any:
        if [t.lower() for t in tokens] == ["none"]:
            return None
        parts = [p.strip() for t in tokens for p in t.split(",") if p.strip()]
        try:
            return info.type_origin(item(p) for p in parts)
        except ValueError:
            what = {int: "integers", float: "numbers"}[item]
            raise ValueError(f"must be comma-separated {what}, got {','.join(tokens)!r}") from None

    return PrimitiveConstructorSpec(
        nargs="*", metavar=f"{item.__name__.upper()},...", instance_from_str=parse,
        is_instance=lambda x: isinstance(x, (tuple, list)), str_from_instance=lambda x: [",".join(map(str, x))])


_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


@_REGISTRY.primitive_rule
def _words(info: PrimitiveTypeInfo) -> PrimitiveConstructorSpec | None:
    """'none' (any case) for None, and a boolean that takes a value as true/false/yes/no/1/0:
    the words the commands always took."""
    if info.type is type(None):
        return PrimitiveConstructorSpec(nargs=1, metavar="none", instance_from_str=lambda args: None,
                                        is_instance=lambda x: x is None, str_from_instance=lambda x: ["none"],
                                        choices=("none", "None"))
    if info.type is bool and tyro.conf.FlagConversionOff in info.markers:
        def boolean(args: list[str]) -> bool:
            if args[0].lower() not in _BOOL_WORDS:
                raise ValueError(f"{args[0]!r} is not true or false")
            return _BOOL_WORDS[args[0].lower()]

        return PrimitiveConstructorSpec(nargs=1, metavar="true|false", instance_from_str=boolean,
                                        is_instance=lambda x: isinstance(x, bool),
                                        str_from_instance=lambda x: [str(x).lower()])
    return None


# ------------------------------------------------------------------------------ errors
def _flag_of(argument: Any) -> str:
    """``--flag``, or ``NAME`` for a positional argument."""
    name = str((getattr(getattr(argument, "lowered", None), "name_or_flags", None) or ("?",))[0])
    return name if name.startswith("-") else name.split(".")[-1].upper()


def _usage_error(event: Any, prog: str, flags: Sequence[str], argv: Sequence[str] = (),
                 switches: Sequence[str] = ()) -> None:
    """tyro's parse errors as one line (tyro's own is a box of several)."""
    from tyro import _errors

    see = f"see '{prog} --help'"
    # A mistyped option is said first, whatever tyro met next: a required option then missing (tyro
    # lists the unknown tokens with it), or an option or argument the unknown one left without its value.
    if isinstance(event, _errors.MissingArgs):
        _no_such_option(_unknown_option(getattr(event, "unrecognized_tokens", ()) or (), flags), flags, see)
    if isinstance(event, _errors.BadValue) and event.offending_value is None:
        _no_such_option(_unknown_option(argv, flags), flags, see)
    if isinstance(event, _errors.UnrecognizedArgs):
        token = event.tokens[0]
        if not token.startswith("-"):  # a value nobody took: name the flag before it
            at = list(argv).index(token) if token in argv else -1
            before = argv[at - 1] if at > 0 else None
            bare = "--" + before[5:] if before and before.startswith("--no-") else before
            if bare in switches:
                raise ConfigError(f"'{before}' takes no value (a switch: {bare} turns it on, --no-{bare[2:]} off), "
                                  f"but {token!r} follows it; {see}")
            after = f" after '{before}'" if before else ""
            raise ConfigError(f"unexpected value {token!r}{after}: a value goes right after the option it sets "
                              f"(--option VALUE), and this command takes no more arguments; {see}")
        _no_such_option(token, flags, see)
    if isinstance(event, _errors.MissingArgs):
        arg = event.missing_arguments[0].arg
        name = _flag_of(arg)
        what = f"option '{name}'" if name.startswith("-") else f"argument '{name}'"
        raise ConfigError(f"Missing {what} (or a --config file that sets it); {see}")
    if isinstance(event, _errors.InvalidChoice):
        raise ConfigError(f"Invalid value for '{_flag_of(event.argument)}': {event.value!r} is not one of "
                          f"{', '.join(event.choices)}; {see}")
    if isinstance(event, _errors.BadValue):
        raise ConfigError(f"Invalid value for '{_flag_of(event.argument)}': "
                          f"{'it takes a value' if event.offending_value is None else repr(event.offending_value)}; {see}")
    if isinstance(event, _errors.InstantiationFailure):
        message = str(event.message)
        if "invalid literal for int()" in message or "could not convert string to float" in message:
            kind = "integer" if "int()" in message else "number"
            message = f"{message.rsplit(': ', 1)[-1]} is not a valid {kind}"
        flag = _flag_of(event.argument)
        own = re.search(r"must be comma-separated \w+, got '[^']*'", message)  # a list's own (also within a union's)
        if own:
            raise ConfigError(f"{flag} {own.group(0)}; {see}")
        raise ConfigError(f"Invalid value for '{flag}': {' '.join(message.split())}; {see}")
    raise ConfigError(f"bad command line ({type(event).__name__}); {see}")


def _unknown_option(tokens: Sequence[str], flags: Sequence[str]) -> str | None:
    """The first token written as an option (``--name``, ``--name=value``) that names no flag of ``flags``."""
    known = {*flags, "--help"}
    return next((str(t) for t in tokens if (n := str(t).split("=")[0]).startswith("--") and n != "--"
                 and n not in known and not (n.startswith("--no-") and "--" + n[5:] in known)), None)


def _no_such_option(token: str | None, flags: Sequence[str], see: str) -> None:
    """``No such option: --x (did you mean --y?)`` with the nearest known flags; nothing for None."""
    if token is None:
        return
    near = difflib.get_close_matches(token.split("=")[0], flags, n=3)
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    raise ConfigError(f"No such option: {token}{hint}; {see}")


# ------------------------------------------------------------------------------ parsing
def _flag_values(argv: Sequence[str], flag: str) -> list[str]:
    """Values given to ``flag`` (``--flag V`` or ``--flag=V``), in order."""
    out = []
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif token.startswith(flag + "="):
            out.append(token.split("=", 1)[1])
    return out


def _expand_aliases(argv: Sequence[str], aliases: Mapping[str, str]) -> list[str]:
    out = []
    for token in argv:
        name, eq, value = token.partition("=")
        if name in aliases:
            token = aliases[name] + eq + value
        elif name.startswith("--no-") and "--" + name[5:] in aliases:  # a boolean's negative
            token = "--no-" + aliases["--" + name[5:]][2:]
        out.append(token)
    return out


def _default_build(cls: type[Config]) -> Callable[[dict[str, Any], dict[str, Any]], Config]:
    return lambda file_values, overrides: cls.make(**deep_merge(file_values, overrides))


def _switches(cls: type[Config], prefix: str = "--") -> list[str]:
    """The boolean flags of ``cls`` that take no value (``--progress-bar`` / ``--no-progress-bar``)."""
    flags = []
    for name, field in cls.model_fields.items():
        flag = prefix + name.replace("_", "-")
        nested = _config_class(field.annotation)
        flags += _switches(nested, flag + ".") if nested is not None else ([flag] if field.annotation is bool else [])
    return flags


def _known_flags(cls: type[Config], prefix: str = "--", default: Any = None) -> list[str]:
    """Every flag of ``cls``; a section's are those of the class its ``default`` holds (the chosen reward kind's)."""
    flags = []
    for name, field in cls.model_fields.items():
        nested, value = _config_class(field.annotation), getattr(default, name, None)
        flag, chosen = prefix + name.replace("_", "-"), type(value) if nested and isinstance(value, nested) else nested
        flags += [flag] if chosen is None else _known_flags(chosen, flag + ".", value)
    return flags


def parse(command: Command, argv: Sequence[str], prog: str) -> tuple[Config, Config | None]:
    """The config (and options) of one command line of ``command``; ConfigError if it is bad
    (``--help`` prints the help and exits 0). An error names a flag as the user wrote it."""
    typed = {command.aliases[t.split("=")[0]]: t.split("=")[0] for t in argv if t.split("=")[0] in command.aliases}
    _conflicting_aliases(argv, command.aliases)
    try:
        return _parse(command, argv, prog)
    except ConfigError as err:
        message = str(err)
        for flag, alias in typed.items():
            message = message.replace(f"'{flag}'", f"'{alias}'")
        raise ConfigError(message) from None


def _parse(command: Command, argv: Sequence[str], prog: str) -> tuple[Config, Config | None]:
    cls: type[Config] = load(command.config)
    options_cls: type[Config] | None = load(command.options) if command.options else None
    build = load(command.build) if command.build else _default_build(cls)
    argv = _expand_aliases(argv, command.aliases)
    files = _flag_values(argv, "--config")
    file_values = read_yaml_mapping(Path(files[-1])) if files else {}
    overrides = parse_overrides(_flag_values(argv, "--set"))
    presets = {flag[2:].replace("-", "_"): _flag_values(argv, flag)[-1]
               for flag in command.presets if _flag_values(argv, flag)}
    presets = deep_merge(presets, _kind_flags(cls, argv))  # --reward.kind K: as --set reward.kind=K, before --set
    early = deep_merge(presets, overrides)
    required = [n for n, f in cls.model_fields.items() if f.is_required() and n not in file_values and n not in early]
    # The options' defaults: a bad value in the file or --set is said before the flags are read.
    default = cls.model_construct(**deep_merge(file_values, early)) if required else build(dict(file_values), early)

    # Annotations evaluated here (this module has no postponed annotations): tyro reads them.
    def command_line(config: Annotated[cls, tyro.conf.arg(name="")] = default,  # type: ignore[valid-type]
                     options: Annotated[options_cls or Config, tyro.conf.arg(name="")] = (  # type: ignore[valid-type]
                         (options_cls or Config).model_construct()),  # noqa: B008 (a frozen config, read by tyro)
                     sources: Annotated[Sources, tyro.conf.arg(name="")] = Sources()) -> Any:
        return config, options

    markers = [tyro.conf.HelptextFromCommentsOff, *([tyro.conf.FlagConversionOff] if command.bool_values else [])]
    aliases = "; ".join(f"{a} = {f}" for a, f in command.aliases.items())
    description = load(command.run).__doc__ or command.help
    if aliases:
        description = f"{description.strip()}\n\nShort options: {aliases}."
    flags = [*_known_flags(cls, default=default), *(_known_flags(options_cls) if options_cls else []), "--config",
             "--set", *command.aliases]
    from tyro import _errors

    switches = [] if command.bool_values else [*_switches(cls), *(_switches(options_cls) if options_cls else [])]
    with _REGISTRY, _errors.on_parse_error(lambda event: _usage_error(event, prog, flags, argv, switches)):
        given, options = tyro.cli(command_line, args=list(argv), prog=prog, description=description,
                                  config=tuple(markers))
    given = _none_as_empty(cls, given)
    for values, of in ((given, cls), (options, options_cls or Config)):
        _check_given(of, values, prog)
    missing = [n for n in required if n not in given]
    if missing:
        field = cls.model_fields[missing[0]]
        positional = any(m is tyro.conf.Positional for m in _markers(field))
        what = f"argument '{missing[0].upper()}'" if positional else f"option '--{missing[0].replace('_', '-')}'"
        raise ConfigError(f"Missing {what} (or a --config file that sets it); see '{prog} --help'")
    config = build(dict(file_values), deep_merge(deep_merge(presets, given), overrides))
    return config, (options_cls.make(**options) if options_cls else None)


def _none_as_empty(cls: type[Config], given: Mapping[str, Any]) -> dict[str, Any]:
    """'none' given to a list option that cannot be None (``--reference none``): the empty list, as its help says."""
    out = dict(given)
    for name, value in given.items():
        field = cls.model_fields.get(name)
        ann = field.annotation if field is not None else None
        nested, origin = _config_class(ann), typing.get_origin(ann)
        if nested is not None and isinstance(value, Mapping):
            out[name] = _none_as_empty(nested, value)
        elif value is None and origin in (tuple, list):
            out[name] = origin()
    return out


def _markers(field: Any) -> list[Any]:
    return list(field.metadata) + list(getattr(field.annotation, "__metadata__", ()))


def _check_given(cls: type[Config], given: Mapping[str, Any], prog: str, prefix: str = "--") -> None:
    """Each value a flag gave, checked against its field alone: one line naming the flag."""
    from pydantic import TypeAdapter, ValidationError

    for name, value in given.items():
        field = cls.model_fields.get(name)
        if field is None:
            continue
        flag = prefix + name.replace("_", "-")
        nested = _config_class(field.annotation)
        if nested is not None:
            if isinstance(value, Mapping):
                _check_given(nested, value, prog, flag + ".")
            continue
        try:
            annotation = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
            TypeAdapter(annotation).validate_python(value)
        except ValidationError as err:
            why = err.errors()[0]["msg"].removeprefix("Value error, ")
            raise ConfigError(f"Invalid value for '{flag}': {why}; see '{prog} --help'") from None


def run_command(command: Command, argv: Sequence[str], prog: str) -> Any:
    """Parse ``argv`` and call the command's function; what it returns (exceptions propagate:
    rmtl.console turns them into one line and an exit status)."""
    config, options = parse(command, argv, prog)
    run = load(command.run)
    return run(config) if options is None else run(config, options)


def run_standalone(command: Command, argv: Sequence[str] | None, prog: str) -> int:
    """Run one command as its own program (``python -m ...``): its exit status, errors as one line."""
    from rmtl.console import exit_code

    return exit_code(run_command, command, sys.argv[1:] if argv is None else list(argv), prog)

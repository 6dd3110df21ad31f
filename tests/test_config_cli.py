"""Options generated from a config class by tyro (rmtl.config_cli): comma lists, 'none', aliases,
sources in order, and every documented ``rmtl`` invocation parses."""

import re
import shlex
from pathlib import Path

import pytest

from rmtl.command_table import COMMANDS
from rmtl.config import Config
from rmtl.config_cli import Command, parse
from rmtl.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent


class ListsConfig(Config):
    checkpoint: tuple[str, ...] = ()
    """Paths."""
    stages: tuple[int, ...] = (0,)
    """Stage ids."""
    levels: tuple[float, ...] | None = (0.1,)
    """Levels ('none': no levels)."""


LISTS = Command(f"{__name__}:ListsConfig", f"{__name__}:ListsConfig", "lists", aliases={"--ck": "--checkpoint"})


def lists(argv):
    return parse(LISTS, argv, "lists")[0]


def test_lists_take_commas_or_several_values_and_none():
    assert lists(["--checkpoint", "a", "b,c"]).checkpoint == ("a", "b", "c")
    assert lists(["--stages", "1,2"]).stages == (1, 2) and lists([]).stages == (0,)
    assert lists(["--levels", "none"]).levels is None and lists(["--ck", "x"]).checkpoint == ("x",)


def test_a_bad_item_names_the_flag_as_typed():
    with pytest.raises(ConfigError, match="--stages must be comma-separated integers, got '1,x'"):
        lists(["--stages", "1,x"])


def test_later_sources_win(tmp_path):
    (tmp_path / "c.yaml").write_text("stages: [3]\ncheckpoint: [f]\nlevels: [0.5]\n")
    cfg = lists(["--config", str(tmp_path / "c.yaml"), "--stages", "4", "--set", "levels=[0.7]"])
    assert cfg.stages == (4,) and cfg.checkpoint == ("f",) and cfg.levels == (0.7,)


def _documented() -> list[tuple[str, list[str]]]:
    """Every ``rmtl ...`` line of README.md, docs/ and results/ READMEs (placeholders filled in)."""
    found = []
    paths = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "results").glob("**/README.md"))]
    for path in [p for p in paths if "errors" not in p.parts and p.name != "errors.md"]:  # bad inputs on purpose
        text = path.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            for m in re.finditer(r"(?:^|[`$(]|\s)rmtl ([a-z][^`|#)\n]*)", line):
                words = m.group(1).split("  ")[0].strip()
                if "..." in words or "[" in words or "<" in words:
                    continue  # a synopsis, not a command line
                found.append((path.name, words))
    return found


@pytest.mark.parametrize("where, line", _documented())
def test_every_documented_invocation_parses(where, line):
    try:
        argv = shlex.split(line)
    except ValueError:
        pytest.skip("not a command line")
    words = []
    for i in range(len(argv), 0, -1):
        if " ".join(argv[:i]) in COMMANDS:
            words = argv[:i]
            break
    if not words:
        pytest.skip("a group or prose")
    rest = []
    for a in argv[len(words):]:
        if a in ("&&", ";") or a.startswith("(") or a.endswith(";"):
            break
        rest.append("PLACEHOLDER" if "$" in a else a)
    try:
        parse(COMMANDS[" ".join(words)], rest, "rmtl " + " ".join(words))
    except ConfigError as err:
        # values the parser cannot know here (files, stores, placeholders such as N) may fail; the flags may not
        if "it takes a value" in str(err) and rest and rest[-1].startswith("--"):
            return  # prose quoting a command up to a flag whose value follows outside the quote
        placeholder = any(re.fullmatch(r"[A-Z][A-Z_0-9]*|.*\{\w+\}.*", a) for a in rest)
        assert "No such option" not in str(err), (where, line, str(err))
        assert placeholder or "Invalid value" not in str(err), (where, line, str(err))


TYPE_METAVARS = {"STR", "INT", "FLOAT", "PATH", "BOOL"}


def _positionals(cls: type[Config]) -> list[str]:
    import tyro

    def markers(field):
        return list(field.metadata) + list(getattr(field.annotation, "__metadata__", ()))

    return [n for n, f in cls.model_fields.items() if any(m is tyro.conf.Positional for m in markers(f))]


def test_every_positional_argument_is_named_in_help(capsys):
    """``rmtl ... --help`` names every positional argument by what it is (``rmtl eval CHECKPOINT``),
    never by its type (``STR``), in the usage line and in its table."""
    from rmtl.config_cli import load

    checked = []
    for words, command in COMMANDS.items():
        names = _positionals(load(command.config))
        if not names:
            continue
        with pytest.raises(SystemExit):
            parse(command, ["--help"], f"rmtl {words}")
        out = capsys.readouterr().out
        start = out.index("positional arguments")
        panel = out[start:out.index("options", start)]  # a box on a terminal, plain text otherwise
        shown = re.findall(r"^(?:│ | {2})(\S+)", panel, flags=re.M)
        usage = out.split("\n\n")[0]
        assert len(shown) == len(names), (words, shown)
        for metavar in shown:
            name = re.fullmatch(r"([A-Z][A-Z_]*)(\.\.\.)?", metavar)  # NAME, or NAME... for several
            assert name and name.group(1) not in TYPE_METAVARS, (words, metavar)
            assert re.search(rf"\s{re.escape(metavar)}(\s|$)", usage), (words, usage)
        checked.append(words)
    assert {"eval", "report", "train select", "store verify", "export minari", "export lerobot", "sweep"} <= set(checked)
    with pytest.raises(SystemExit):
        parse(COMMANDS["eval"], ["--help"], "rmtl eval")
    assert capsys.readouterr().out.splitlines()[0].endswith("[OPTIONS] CHECKPOINT")

"""Options generated from a config class (rmtl.command_config): lists from commas and repeats."""

import pytest

from rmtl.command_config import config_command, invoke
from rmtl.config import Config
from rmtl.errors import ConfigError


class ListsConfig(Config):
    checkpoint: tuple[str, ...] = ()
    """Paths."""
    stages: tuple[int, ...] = (0,)
    """Stage ids."""


def parse(argv):
    return invoke(config_command(ListsConfig, lambda cfg: cfg), argv, "lists")


def test_a_repeated_list_option_adds_to_the_list_instead_of_replacing_it():
    assert parse(["--checkpoint", "a", "--checkpoint", "b,c"]).checkpoint == ("a", "b", "c")
    assert parse(["--checkpoint", "a,b"]).checkpoint == ("a", "b")
    assert parse(["--stages", "1", "--stages", "2,3"]).stages == (1, 2, 3)
    assert parse([]).stages == (0,)  # not given: the default


def test_a_bad_item_in_a_repeated_option_names_the_option():
    with pytest.raises(ConfigError, match="--stages must be comma-separated integers"):
        parse(["--stages", "1", "--stages", "x"])


def test_an_alias_and_its_field_on_one_line_are_refused():
    """One name per field: a short alias and the long option both given is a conflict, not a silent winner."""
    cmd = config_command(ListsConfig, lambda cfg: cfg, aliases={"ck": "checkpoint"})
    assert invoke(cmd, ["--ck", "a"], "lists").checkpoint == ("a",)
    with pytest.raises(ConfigError, match="--checkpoint and --ck both set checkpoint; give only one of them"):
        invoke(cmd, ["--checkpoint", "a", "--ck", "b"], "lists")

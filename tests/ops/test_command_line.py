"""Where a command's configuration file comes from: the argument, --config or JETKAFKA_CONFIG."""

from __future__ import annotations

import argparse

import pytest

from jetkafka.errors import JetkafkaError
from jetkafka.ops._command_line import CONFIG_ENV, add_config_argument, resolve_config_file


def parsed(argv: list[str], positional: bool) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_config_argument(parser, positional=positional)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "positional", "env", "expected"),
    [
        (["a.yaml"], True, {}, "a.yaml"),
        (["--config", "a.yaml"], True, {}, "a.yaml"),
        (["--config", "a.yaml"], False, {}, "a.yaml"),
        ([], False, {CONFIG_ENV: "env.yaml"}, "env.yaml"),
        ([], True, {CONFIG_ENV: "env.yaml"}, "env.yaml"),
        (["a.yaml"], True, {CONFIG_ENV: "env.yaml"}, "a.yaml"),  # what the command line says wins
        (["--config", "a.yaml"], False, {CONFIG_ENV: "env.yaml"}, "a.yaml"),
        (["a.yaml", "--config", "a.yaml"], True, {}, "a.yaml"),
    ],
)
def test_the_file_is_taken_from_the_command_line_then_the_environment(
    argv: list[str], positional: bool, env: dict[str, str], expected: str
) -> None:
    args = parsed(argv, positional)
    resolve_config_file(args, env)
    assert args.config == expected


def test_no_file_names_the_option_and_the_variable() -> None:
    args = parsed([], False)
    with pytest.raises(JetkafkaError, match=f"give --config FILE, or set {CONFIG_ENV}=FILE"):
        resolve_config_file(args, {CONFIG_ENV: ""})


def test_two_different_files_are_refused() -> None:
    with pytest.raises(JetkafkaError, match="two configuration files"):
        resolve_config_file(parsed(["a.yaml", "--config", "b.yaml"], True), {})


def test_commands_without_a_configuration_file_are_left_alone() -> None:
    args = argparse.Namespace(events=3)
    resolve_config_file(args, {CONFIG_ENV: "env.yaml"})
    assert not hasattr(args, "config")

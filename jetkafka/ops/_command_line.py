"""What the commands that act on a group from its configuration file share on the command line.

Every such command takes its file the same way: ``--config FILE``, else the environment
variable ``JETKAFKA_CONFIG``; ``run`` and ``validate`` also take it as their positional
argument, as they always did (:func:`add_config_argument`, resolved by
:func:`resolve_config_file` in the main program before the command runs).

``jetkafka status``, ``offsets show|reset`` (:mod:`jetkafka.ops._commands`) and ``recovery
list|cancel`` (:mod:`jetkafka.recovery._commands`) take the same options, read the
configuration the same way and print JSON alike; this module is that common part, so each
command reads and answers like the others.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from jetkafka.config import JetkafkaConfig
from jetkafka.errors import JetkafkaError

__all__ = [
    "CONFIG_ENV",
    "InvalidConfigFile",
    "add_config_argument",
    "add_config_options",
    "add_topic_option",
    "load_command_config",
    "partition_numbers",
    "print_errors",
    "print_json",
    "read_config_file",
    "resolve_config_file",
]

CONFIG_ENV = "JETKAFKA_CONFIG"


def add_config_argument(parser: argparse.ArgumentParser, positional: bool = False) -> None:
    """``--config FILE``, defaulting to ``$JETKAFKA_CONFIG``; with ``positional``, also ``CONFIG``.

    Not ``required`` in argparse's sense: :func:`resolve_config_file` fills ``args.config`` from
    whichever was given and names ``JETKAFKA_CONFIG`` when none was.
    """
    if positional:
        parser.add_argument(
            "config_file", nargs="?", metavar="CONFIG", help=f"path of the YAML configuration, or of a folder of them (or --config FILE, or ${CONFIG_ENV})"
        )
    parser.add_argument(
        "--config", metavar="FILE", help=f"the group's YAML configuration (default: ${CONFIG_ENV})"
    )
    parser.set_defaults(needs_config_file=True)


def resolve_config_file(args: argparse.Namespace, environ: dict[str, str] | None = None) -> None:
    """Set ``args.config`` for a command that takes a configuration file; raise :class:`~jetkafka.errors.JetkafkaError`
    when none is given, or two different ones are."""
    if not getattr(args, "needs_config_file", False):
        return
    env = os.environ if environ is None else environ
    positional = getattr(args, "config_file", None)
    if positional and args.config and positional != args.config:
        raise JetkafkaError(f"two configuration files given, {positional} and --config {args.config}; give one")
    chosen = positional or args.config or env.get(CONFIG_ENV) or None
    if not chosen:
        raise JetkafkaError(
            f"no configuration file: give --config FILE, or set {CONFIG_ENV}=FILE in the environment"
        )
    args.config = chosen


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """``--config`` (or ``$JETKAFKA_CONFIG``), ``--json`` and ``--log-level``."""
    add_config_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON (keys documented in docs/operations.md)")
    parser.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level (default WARNING)"
    )


def add_topic_option(parser: argparse.ArgumentParser, what: str = "topic to show") -> None:
    """``--topic``, repeatable; the commands default to the configuration's ``channel.topics``."""
    parser.add_argument("--topic", action="append", metavar="T", help=f"{what} (repeatable; default: channel.topics)")


def partition_numbers(text: str) -> list[int]:
    """The ``type`` of a ``--partitions P,P`` option: comma-separated numbers >= 0."""
    return numbers_at_least_zero(text, "partition numbers", "0,3")


def numbers_at_least_zero(text: str, what: str, example: str) -> list[int]:
    """``text`` as comma-separated whole numbers >= 0 (at least one), or an
    :class:`argparse.ArgumentTypeError` saying what was expected, with ``example``."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {what}, e.g. {example}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give {what} >= 0, e.g. {example}")
    return values


def load_command_config(args: argparse.Namespace) -> JetkafkaConfig:
    """Set up logging to stderr at ``--log-level`` and load ``--config``.

    The ZooKeeper and librdkafka clients' own loggers are held at ERROR: a command's output is
    its answer, and their connection chatter would bury it.
    """
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("jetkafka.librdkafka").setLevel(logging.ERROR)
    logging.getLogger("jetkafka.zookeeper").setLevel(logging.ERROR)
    return read_config_file(args.config)


class InvalidConfigFile(JetkafkaError):
    """A configuration file with errors; ``errors`` holds every one, in the order of the file.

    The main program prints each as a message of its own (:func:`print_errors`), as
    ``jetkafka validate`` does.
    """

    def __init__(self, source: str, errors: Sequence[JetkafkaError]) -> None:
        self.source = source
        self.errors = list(errors)
        super().__init__("\n".join(str(error) for error in self.errors))


def read_config_file(path: str | os.PathLike[str]) -> JetkafkaConfig:
    """The configuration at ``path``; :class:`InvalidConfigFile` with every error of the file,
    not only the first (a user fixes them all in one go).

    A file with a ``process.yaml`` beside it is read with that file's sections, as
    ``jetkafka run DIR`` reads it (:func:`jetkafka.subscriptions._folder.read_channel_file`).
    A folder is refused with the fix: the command needs one of its files.
    """
    from jetkafka.subscriptions._folder import read_channel_file

    if os.path.isdir(path):
        raise JetkafkaError(
            f"{os.fspath(path)} is a folder; this command reads one channel's file: "
            f"give one of the folder's files, e.g. --config {os.path.join(os.fspath(path), 'NAME.yaml')}"
        )
    config, errors = read_channel_file(path)
    if errors:
        raise InvalidConfigFile(os.fspath(path), errors)
    assert config is not None  # no errors: a configuration
    return config


def print_errors(source: str, errors: Sequence[JetkafkaError]) -> None:
    """Each error as one ``jetkafka: error:`` block on stderr, then ``FILE: N errors`` when
    there are several."""
    for error in errors:
        print(f"jetkafka: error: {error}", file=sys.stderr)
    if len(errors) > 1:
        print(f"{source}: {len(errors)} errors", file=sys.stderr)


def print_json(data: Any) -> None:
    """``data`` as indented JSON with sorted keys on stdout."""
    print(json.dumps(data, indent=2, sort_keys=True))

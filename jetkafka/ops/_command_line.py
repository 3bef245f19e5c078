"""What the commands that act on a group from its configuration file share on the command line.

``jetkafka status``, ``offsets show|reset`` (:mod:`jetkafka.ops._commands`) and ``recovery
list|cancel`` (:mod:`jetkafka.recovery._commands`) take the same options, read the
configuration the same way and print JSON alike; this module is that common part, so each
command reads and answers like the others.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from jetkafka.config import JetkafkaConfig, load_config

__all__ = ["add_config_options", "add_topic_option", "load_command_config", "partition_numbers", "print_json"]


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """``--config`` (required), ``--json`` and ``--log-level``."""
    parser.add_argument("--config", required=True, metavar="FILE", help="the group's YAML configuration")
    parser.add_argument("--json", action="store_true", help="print JSON (keys documented in docs/operations.md)")
    parser.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level (default WARNING)"
    )


def add_topic_option(parser: argparse.ArgumentParser, what: str = "topic to show") -> None:
    """``--topic``, repeatable; the commands default to the configuration's ``channel.topics``."""
    parser.add_argument("--topic", action="append", metavar="T", help=f"{what} (repeatable; default: channel.topics)")


def partition_numbers(text: str) -> list[int]:
    """The ``type`` of a ``--partitions P,P`` option: comma-separated numbers >= 0."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of partition numbers, e.g. 0,3") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give partition numbers >= 0, e.g. 0,3")
    return values


def load_command_config(args: argparse.Namespace) -> JetkafkaConfig:
    """Set up logging to stderr at ``--log-level`` and load ``--config``.

    The ZooKeeper and librdkafka clients' own loggers are held at ERROR: a command's output is
    its answer, and their connection chatter would bury it.
    """
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("jetkafka.librdkafka").setLevel(logging.ERROR)
    logging.getLogger("jetkafka.zookeeper").setLevel(logging.ERROR)
    return load_config(args.config)


def print_json(data: Any) -> None:
    """``data`` as indented JSON with sorted keys on stdout."""
    print(json.dumps(data, indent=2, sort_keys=True))

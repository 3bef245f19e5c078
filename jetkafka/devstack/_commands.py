"""The ``jetkafka dev`` command: ``up``, ``down`` and ``status`` of the local stack.

:func:`register` adds the command to the main parser's subparsers. Every leaf parser sets
``func``, a callable taking the parsed namespace and returning the exit code. Errors are raised
as :class:`~jetkafka.errors.JetkafkaError` for :func:`jetkafka.cli.main` to print.

Exit codes: 0 on success; ``status`` returns 3 when either server is not running.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from jetkafka.devstack._stack import STATE_DIR_ENV, DevStack

__all__ = ["register", "cmd_up", "cmd_down", "cmd_status"]

EXIT_NOT_RUNNING = 3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``dev`` and its subcommands to ``subparsers``; return the ``dev`` parser."""
    dev = subparsers.add_parser(
        "dev",
        help="run a local ZooKeeper and Kafka-protocol broker for development and tests",
        description=(
            "Run a local ZooKeeper (from pyspark's jars; needs Java 11 or newer) and a Kafka-protocol "
            "broker (noida-db, the devstack extra) in the background; nothing else (Spark, which "
            "needs Java 17, is not started). State, data and logs "
            f"live in --state-dir (default: ${STATE_DIR_ENV} or ./.jetkafka/devstack)."
        ),
    )
    commands = dev.add_subparsers(dest="dev_command", metavar="{up,down,status}", required=True)

    up = commands.add_parser(
        "up",
        help="start both servers (or report them if already running)",
        description=(
            "Start ZooKeeper and the broker unless they already run, then print their "
            "addresses. Ports default to those of the previous run, else free ports."
        ),
    )
    _add_state_dir(up)
    up.add_argument("--json", action="store_true", help="print the addresses as JSON")
    up.add_argument("--zookeeper-port", type=_port, metavar="P", help="ZooKeeper client port")
    up.add_argument("--broker-port", type=_port, metavar="P", help="broker (Kafka) port")
    up.set_defaults(func=cmd_up)

    down = commands.add_parser("down", help="stop both servers (data is kept)")
    _add_state_dir(down)
    down.set_defaults(func=cmd_down)

    status = commands.add_parser(
        "status", help="show whether the servers run (exit code 3 if either does not)"
    )
    _add_state_dir(status)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=cmd_status)
    return dev


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        metavar="D",
        help=f"where state, data and logs live (default: ${STATE_DIR_ENV} or ./.jetkafka/devstack)",
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range 1-65535: {value}")
    return value


def cmd_up(args: argparse.Namespace) -> int:
    stack = DevStack(args.state_dir)
    info = stack.up(zookeeper_port=args.zookeeper_port, broker_port=args.broker_port)
    if args.json:
        print(json.dumps(info.as_dict()))
    else:
        print(f"jetkafka dev stack is up (state in {stack.state_dir})")
        print(_table(stack.status()))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    stack = DevStack(args.state_dir)
    stopped = stack.down()
    print(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    stack = DevStack(args.state_dir)
    status = stack.status()
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(f"state in {status['state_dir']}")
        print(_table(status))
    running = all(status[name]["running"] for name in ("zookeeper", "broker"))
    return 0 if running else EXIT_NOT_RUNNING


def _table(status: dict[str, Any]) -> str:
    header = ("SERVER", "ADDRESS", "STATUS", "PID", "LOG")
    rows = [header]
    for name in ("zookeeper", "broker"):
        entry = status[name]
        rows.append(
            (
                name,
                entry["address"] or "-",
                "running" if entry["running"] else "stopped",
                str(entry["pid"]) if entry["pid"] else "-",
                entry["log"],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    )

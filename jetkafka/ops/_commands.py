"""The ``jetkafka status``, ``jetkafka offsets show|reset`` and ``jetkafka ui`` commands.

:func:`register` adds them to the main parser's subparsers; every leaf parser sets ``func``
(namespace in, exit code out). Errors a user can cause are raised as
:class:`~jetkafka.errors.JetkafkaError` for the main program to print.

Exit codes: 0 on success; ``offsets reset`` returns 1 when some partitions were not moved
within ``--timeout`` (the output names them and how to continue); 2 for usage errors.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from jetkafka.ops._command_line import (
    add_config_options,
    add_topic_option,
    load_command_config,
    partition_numbers,
    print_json,
)

__all__ = ["register", "cmd_status", "cmd_offsets_show", "cmd_offsets_reset", "EXIT_INCOMPLETE"]

EXIT_INCOMPLETE = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``status`` and ``offsets`` (with ``show`` and ``reset``) to ``subparsers``."""
    status = subparsers.add_parser(
        "status",
        help="show a group's instances, partition owners, offsets and lag",
        description="Read the group of --config from ZooKeeper and Kafka; no channel needs to run.",
    )
    add_config_options(status)
    add_topic_option(status)
    status.set_defaults(func=cmd_status)

    offsets = subparsers.add_parser("offsets", help="show or reset a group's committed offsets")
    commands = offsets.add_subparsers(dest="offsets_command", metavar="{show,reset}", required=True)

    show = commands.add_parser("show", help="committed offset, watermarks and lag per partition")
    add_config_options(show)
    add_topic_option(show)
    show.set_defaults(func=cmd_offsets_show)

    reset = commands.add_parser(
        "reset",
        help="move committed offsets, safely while instances run",
        description=(
            "Move the group's committed offsets of one topic. Running instances pause each affected "
            "partition, finish the batch in hand, commit the new offset and resume from it; "
            "partitions no instance holds are moved by this command. Each partition moves exactly "
            "once per command id: after a failure or a crash, repeat the command with the --id it "
            "printed to finish it."
        ),
    )
    add_config_options(reset)
    reset.add_argument("--topic", required=True, metavar="T", help="topic whose offsets to move")
    reset.add_argument(
        "--to",
        required=True,
        metavar="WHERE",
        help="earliest | latest | an offset | an ISO-8601 time (e.g. 2024-05-01T12:00:00Z; without a zone: UTC)",
    )
    reset.add_argument("--partitions", type=partition_numbers, metavar="P,P", help="only these partitions (default: all)")
    reset.add_argument("--id", dest="command_id", metavar="ID", help="command id; repeat it to continue an interrupted reset")
    reset.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds to wait for every partition (default 60)")
    reset.set_defaults(func=cmd_offsets_reset)

    from jetkafka.ops import _ui

    _ui.register(subparsers)


def cmd_status(args: argparse.Namespace) -> int:
    from jetkafka.ops._status import group_status, render_status

    status = group_status(load_command_config(args), args.topic)
    if args.json:
        print_json(status.to_dict())
    else:
        print(render_status(status))
    return 0


def cmd_offsets_show(args: argparse.Namespace) -> int:
    from jetkafka.ops._status import render_offsets, show_offsets

    status = show_offsets(load_command_config(args), args.topic)
    if args.json:
        data = status.to_dict()
        del data["instances"]
        print_json(data)
    else:
        print(render_offsets(status))
    return 0


def cmd_offsets_reset(args: argparse.Namespace) -> int:
    from jetkafka.ops._reset import ResetIncomplete, ResetResult, new_command_id, reset_offsets

    config = load_command_config(args)
    command_id = args.command_id or new_command_id()
    # Printed first: whoever interrupts the command needs the id to continue it.
    print(f"reset {command_id}: if interrupted, repeat the command with --id {command_id} to continue it", file=sys.stderr)
    try:
        result: ResetResult = reset_offsets(
            config, args.topic, args.to, args.partitions, timeout=args.timeout, command_id=command_id
        )
    except ResetIncomplete as exc:
        _print_reset(exc.result, args.json)
        print(f"jetkafka: error: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE
    _print_reset(result, args.json)
    return 0


def _print_reset(result: Any, as_json: bool) -> None:
    from jetkafka.ops._status import format_table

    if as_json:
        print_json(result.to_dict())
        return
    for earlier in result.superseded:
        print(f"note: the interrupted reset {earlier} of {result.topic} was aborted first")
    verb = "continued" if result.resumed else "started"
    print(f"reset {result.command_id} ({verb}): {result.topic} to {result.to}")
    rows = []
    for p, target in sorted(result.targets.items()):
        done = result.applied.get(p)
        if done is not None:
            rows.append((p, done.old, done.new, done.by))
        else:
            rows.append((p, None, f"({target})", "not moved"))
    for line in format_table(("PARTITION", "OLD", "NEW", "BY"), rows, right={0, 1, 2}):
        print("  " + line)
    if result.ok:
        print(f"done: {len(result.applied)} partition(s) moved; consumers resume from the new offsets")

"""The ``jetkafka status``, ``jetkafka offsets show|reset|history`` and ``jetkafka ui`` commands.

``jetkafka groups`` and ``offsets delete|export|import`` live in :mod:`jetkafka.ops._group_commands`;
:func:`register` adds them too.

:func:`register` adds them to the main parser's subparsers; every leaf parser sets ``func``
(namespace in, exit code out). Errors a user can cause are raised as
:class:`~jetkafka.errors.JetkafkaError` for the main program to print.

Exit codes: 0 on success; ``offsets reset`` returns 1 when some partitions were not moved
within ``--timeout`` (the output names them and how to continue); 2 for usage errors.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from jetkafka.errors import JetkafkaError
from jetkafka.ops._command_line import (
    add_config_options,
    add_topic_option,
    load_command_config,
    partition_numbers,
    print_json,
)

__all__ = [
    "register",
    "cmd_status",
    "cmd_offsets_show",
    "cmd_offsets_reset",
    "cmd_offsets_history",
    "duration_ms",
    "topic_not_read",
    "EXIT_INCOMPLETE",
]

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
    status.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        metavar="S",
        help="read and show it again every S seconds (default 2) until Ctrl-C",
    )
    status.add_argument(
        "--brief", action="store_true", help="with --config DIR: only the table of subscriptions, not each group's status"
    )
    status.set_defaults(func=cmd_status)

    offsets = subparsers.add_parser("offsets", help="show, reset, undo, delete, export or import a group's committed offsets")
    commands = offsets.add_subparsers(
        dest="offsets_command", metavar="{show,reset,history,delete,export,import}", required=True
    )

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
            "printed to finish it. Targets are computed once, when the command starts; every "
            "applied reset is recorded in the group's offsets history (`jetkafka offsets history`)."
        ),
    )
    add_config_options(reset)
    which = reset.add_mutually_exclusive_group()
    which.add_argument(
        "--topic",
        metavar="T",
        help="topic whose offsets to move (default: the group's topic, when channel.topics holds one; "
        "with --undo: only this topic's part of the reset)",
    )
    which.add_argument(
        "--all-topics",
        action="store_true",
        help="move every topic of channel.topics, each by a reset of its own with the id ID.TOPIC",
    )
    where = reset.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--to",
        metavar="WHERE",
        help="earliest | latest | an offset | an ISO-8601 time (e.g. 2024-05-01T12:00:00Z; without a zone: UTC)",
    )
    where.add_argument(
        "--shift-by",
        type=int,
        metavar="N",
        help="move each committed offset by N (negative: back, e.g. --shift-by -100), clamped to the log",
    )
    where.add_argument(
        "--by-duration",
        type=duration_ms,
        metavar="DURATION",
        help="move to the first record at or after now minus an ISO-8601 duration (PT1H, P1DT12H, PT30M)",
    )
    where.add_argument(
        "--undo", metavar="ID", help="move the partitions a reset moved back to their offsets before it (see history)"
    )
    where.add_argument(
        "--to-kafka-group",
        metavar="G",
        help="to the offsets Kafka consumer group G committed (partitions G never committed: "
        "channel.auto_offset_reset, earliest or latest)",
    )
    reset.add_argument("--dry-run", action="store_true", help="print the plan (old, new, who applies it); change nothing")
    reset.add_argument("--partitions", type=partition_numbers, metavar="P,P", help="only these partitions (default: all)")
    reset.add_argument("--id", dest="command_id", metavar="ID", help="command id; repeat it to continue an interrupted reset")
    reset.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds to wait for every partition (default 60)")
    reset.set_defaults(func=cmd_offsets_reset)

    history = commands.add_parser(
        "history",
        help="the resets applied to the group, newest last",
        description=(
            "Every reset a command applied (who, when, command id, old and new offset per partition), "
            "the last 100 kept in ZooKeeper. Undo one with `jetkafka offsets reset --undo ID`."
        ),
    )
    add_config_options(history)
    add_topic_option(history, "only resets of this topic")
    history.set_defaults(func=cmd_offsets_history)

    from jetkafka.ops import _group_commands, _ui

    _group_commands.register_offsets(commands)
    _group_commands.register(subparsers)
    _ui.register(subparsers)


def duration_ms(text: str) -> int:
    """The ``type`` of ``--by-duration``: an ISO-8601 duration in milliseconds."""
    from jetkafka.ops._protocol import ResetError
    from jetkafka.ops._targets import parse_duration

    try:
        return parse_duration(text)
    except ResetError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--by-duration ")) from None


def cmd_status(args: argparse.Namespace) -> int:
    from jetkafka.ops._other_chroots import describe_elsewhere, group_elsewhere
    from jetkafka.ops._status import group_status, render_status

    if os.path.isdir(args.config):
        return _folder_status(args)
    if args.watch is not None:
        return _watch_status(args)
    config = load_command_config(args)
    status = group_status(config, args.topic)
    elsewhere = group_elsewhere(config.zookeeper, config.channel.group)
    if args.json:
        print_json({**status.to_dict(), "elsewhere": [{"chroot": g.chroot, "live_instances": g.live_instances} for g in elsewhere]})
    else:
        print("\n".join([render_status(status), *describe_elsewhere(config.channel.group, elsewhere)]))
    return 0


def _folder_status(args: argparse.Namespace) -> int:
    from jetkafka.ops._folder_status import folder_status, folder_status_dict, render_folder_status

    if args.watch is not None or args.topic:
        raise JetkafkaError("--watch and --topic take one channel's file, not a folder: give --config DIR/NAME.yaml")
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(levelname)s %(name)s: %(message)s")
    rows = folder_status(args.config)
    if args.json:
        print_json(folder_status_dict(rows))
    else:
        print(render_folder_status(rows, brief=args.brief))
    return 0


def _watch_status(args: argparse.Namespace) -> int:
    from jetkafka.coordination._session import zookeeper_session
    from jetkafka.ops._status import BrokerView, read_group_status
    from jetkafka.ops._status_watch import watch_status

    if args.watch <= 0:
        raise JetkafkaError(f"--watch {args.watch:g}: give a number of seconds > 0, e.g. --watch 5")
    config = load_command_config(args)
    group, topics = config.channel.group, tuple(args.topic or config.channel.topics)
    with zookeeper_session(config.zookeeper) as client, BrokerView(config.kafka, group) as broker:
        return watch_status(lambda: read_group_status(client, broker, group, topics), sys.stdout, args.watch, args.json)


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


def topic_not_read(config: Any, topic: str) -> str:
    """The warning of a reset of a topic the configuration's channel does not consume."""
    return (
        f"topic {topic} is not in channel.topics ({', '.join(config.channel.topics)}) of {config.source}: "
        f"no instance of group {config.channel.group} reads it, so the command moves its offsets itself "
        "and they take effect once the topic is added; if you meant another group, use its file"
    )


def _reset_target(args: argparse.Namespace, config: Any) -> Any:
    from jetkafka.kafka_groups._start import start_fallback
    from jetkafka.ops._targets import Target

    if args.to_kafka_group is not None:
        return Target.kafka_group(args.to_kafka_group, start_fallback(config))
    if args.shift_by is not None:
        return Target("shift", args.shift_by)
    if args.by_duration is not None:
        return Target("duration", args.by_duration)
    return args.to


def cmd_offsets_reset(args: argparse.Namespace) -> int:
    from jetkafka.ops._plan import plan_reset
    from jetkafka.ops._reset import (
        ResetIncomplete,
        ResetResult,
        check_command_id,
        new_command_id,
        reset_offsets,
        undo_reset,
    )
    from jetkafka.ops._reset_request import reset_request

    check_command_id(args.command_id)
    config = load_command_config(args)
    if args.undo is None and args.topic is not None and args.topic not in config.channel.topics:
        print(f"jetkafka: warning: {topic_not_read(config, args.topic)}", file=sys.stderr)
    command_id = args.command_id or new_command_id()
    request = reset_request(
        config, command_id, topic=args.topic, all_topics=args.all_topics, undo=args.undo, partitions=args.partitions
    )
    if args.dry_run:
        plans = [plan_reset(config, p.topic, _reset_target(args, config), args.partitions, undo=p.undo) for p in request.parts]
        _print_plans(plans, request.several, args.json)
        return 0
    # Printed first: whoever interrupts the command needs the id to continue it.
    print(f"reset {command_id}: if interrupted, repeat the command with --id {command_id} to continue it", file=sys.stderr)
    as_list = request.several and args.json  # one JSON object for every topic, at the end
    results: list[ResetResult] = []
    incomplete: ResetIncomplete | None = None
    for part in request.parts:
        try:
            # A part is continued by repeating the whole command: its messages name command_id.
            if part.undo is not None:
                result = undo_reset(
                    config, part.undo, args.partitions, args.timeout, part.command_id, repeat_id=command_id
                )
            else:
                assert part.topic is not None  # a reset's part names its topic
                result = reset_offsets(
                    config,
                    part.topic,
                    _reset_target(args, config),
                    args.partitions,
                    args.timeout,
                    part.command_id,
                    repeat_id=command_id,
                )
            results.append(result)
        except ResetIncomplete as exc:
            results.append(exc.result)
            incomplete = exc
        if not as_list:
            _print_reset(results[-1], args.json)
        if incomplete is not None:
            break
    if as_list:
        print_json({"command_id": command_id, "resets": [r.to_dict() for r in results]})
    if incomplete is not None:
        print(f"jetkafka: error: {incomplete}", file=sys.stderr)
        left = len(request.parts) - len(results)
        if left:
            print(
                f"jetkafka: {left} more topic(s) not started; repeat the command with --id {command_id} to finish "
                "this one and move them",
                file=sys.stderr,
            )
        return EXIT_INCOMPLETE
    if request.several and not args.json:
        print(f"all {len(results)} topic(s) done; undo them together with: jetkafka offsets reset --undo {command_id}")
    return 0


def _print_reset(result: Any, as_json: bool) -> None:
    from jetkafka.ops._tables import format_table

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
    for p, note in sorted(result.notes.items()):
        print(f"  note: partition {p}: {note}")
    if result.ok:
        print(f"done: {len(result.applied)} partition(s) moved; consumers resume from the new offsets")
        print(f"recorded in the offsets history; undo with: jetkafka offsets reset --undo {result.command_id}")


def _print_plans(plans: list[Any], several: bool, as_json: bool) -> None:
    from jetkafka.ops._tables import format_table

    if as_json:
        print_json({"dry_run": True, "plans": [p.to_dict() for p in plans]} if several else plans[0].to_dict())
        return
    for plan in plans:
        print(f"dry run, nothing changed: {plan.topic} to {plan.to}")
        rows = [(m.partition, m.old, m.new, m.by) for m in plan.moves]
        for line in format_table(("PARTITION", "OLD", "NEW", "APPLIED BY"), rows, right={0, 1, 2}):
            print("  " + line)
        for m in plan.moves:
            if m.note:
                print(f"  note: partition {m.partition}: {m.note}")
    print("run it without --dry-run to apply it; the targets are computed again then")


def cmd_offsets_history(args: argparse.Namespace) -> int:
    import datetime as dt

    from jetkafka.coordination._paths import GroupPaths
    from jetkafka.coordination._session import zookeeper_session
    from jetkafka.ops._history import read_history

    config = load_command_config(args)
    with zookeeper_session(config.zookeeper) as client:
        entries = read_history(client, GroupPaths(config.channel.group), args.topic)
    if args.json:
        print_json({"group": config.channel.group, "entries": [e.to_dict() for e in entries]})
        return 0
    if not entries:
        print(f"group {config.channel.group}: no resets in the offsets history")
        return 0
    for e in entries:
        when = dt.datetime.fromtimestamp(e.at, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        what = f"undo of {e.undoes}" if e.kind == "undo" else f"to {e.to}"
        print(f"{when}  {e.command_id}  {e.topic} {what}  {e.status}  by {e.who} pid {e.pid}")
        moves = ", ".join(f"[{p}] {r.old if r.old is not None else '-'} -> {r.new}" for p, r in sorted(e.partitions.items()))
        print(f"    {moves}")
    return 0

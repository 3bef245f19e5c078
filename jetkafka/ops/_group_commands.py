"""The ``jetkafka groups`` and ``jetkafka offsets delete|export|import`` commands.

:func:`register` adds ``groups`` to the main subparsers and :func:`register_offsets` the three
``offsets`` subcommands (see :mod:`jetkafka.ops._group_admin` for what they guarantee). Each
takes its configuration like every group command (``--config`` or ``JETKAFKA_CONFIG``).
``groups`` uses only its ``zookeeper`` and ``kafka`` sections: the file's group is ignored.
``offsets delete|export|import`` act on the file's ``channel.group`` unless ``--group`` names
another, so one file serves to move a group's offsets into a new group.

Exit codes: 0 on success (a dry run included); 2 when refused (the group has members, the file
is invalid) or on a usage error, with the reason on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from jetkafka.errors import JetkafkaError
from jetkafka.ops._command_line import (
    add_config_argument,
    add_config_options,
    add_topic_option,
    load_command_config,
    print_json,
)

__all__ = ["register", "register_offsets", "cmd_groups", "cmd_offsets_delete", "cmd_offsets_export", "cmd_offsets_import"]

def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``groups`` to the main parser's ``subparsers``."""
    groups = subparsers.add_parser(
        "groups",
        help="list the groups under the chroot, with members and total lag",
        description=(
            "List every group under the ZooKeeper chroot of --config: its members, the topics it "
            "committed offsets for and its total lag. Only the zookeeper and kafka sections of the "
            "file are used; its channel.group is ignored."
        ),
    )
    add_config_options(groups)
    groups.add_argument("--no-lag", action="store_true", help="do not ask Kafka for the lag (ZooKeeper only)")
    groups.set_defaults(func=cmd_groups)


def _group_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group", metavar="G", help="the group to act on (default: channel.group of the configuration)")


def register_offsets(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``delete``, ``export`` and ``import`` to the ``offsets`` subcommands."""
    delete = commands.add_parser(
        "delete",
        help="delete a group's committed offsets (only when it has no members)",
        description=(
            "Delete the group's committed offsets (of --topic, default all its topics). Refused while any "
            "instance of the group is registered; the check and the delete are one ZooKeeper transaction."
        ),
    )
    add_config_options(delete)
    _group_option(delete)
    add_topic_option(delete, "only this topic's offsets")
    delete.add_argument("--dry-run", action="store_true", help="print the offsets that would be deleted; change nothing")
    delete.set_defaults(func=cmd_offsets_delete)

    export = commands.add_parser(
        "export",
        help="write a group's committed offsets as JSON",
        description="Write the group's committed offsets as JSON (format in docs/operations.md) to --output or stdout.",
    )
    # Not add_config_options: its --json would promise a choice export does not have (it always writes JSON).
    add_config_argument(export)
    export.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level (default WARNING)"
    )
    _group_option(export)
    add_topic_option(export, "only this topic's offsets")
    export.add_argument("--output", "-o", metavar="FILE", help="write to FILE (default: stdout)")
    export.add_argument(
        "--to-kafka-group",
        metavar="G",
        help="write the offsets into Kafka consumer group G instead of a file, for a consumer-group "
        "application to continue where the group stopped (the group must be stopped and G have no members)",
    )
    export.add_argument("--dry-run", action="store_true", help="with --to-kafka-group: print the plan; change nothing")
    export.set_defaults(func=cmd_offsets_export)

    imported = commands.add_parser(
        "import",
        help="write offsets from an export file into a group (only when it has no members)",
        description=(
            "Write the offsets of FILE (made by `jetkafka offsets export`) into the group, whatever group the "
            "file came from; partitions not in the file keep theirs. Refused while any instance of the group "
            "is registered; the check and the writes are one ZooKeeper transaction."
        ),
    )
    imported.add_argument("file", metavar="FILE", nargs="?", help="the JSON offsets file")
    imported.add_argument(
        "--from-kafka-group",
        metavar="G",
        help="instead of a file: the offsets Kafka consumer group G committed (partitions G never "
        "committed: channel.auto_offset_reset, earliest or latest)",
    )
    add_config_options(imported)
    _group_option(imported)
    imported.add_argument("--dry-run", action="store_true", help="print old and new offset per partition; change nothing")
    imported.set_defaults(func=cmd_offsets_import)


def _group(args: argparse.Namespace, configured: str) -> str:
    group = args.group or configured
    if not group or "/" in group:
        raise JetkafkaError(f"--group {group!r}: give a group name without '/'")
    return str(group)


def cmd_groups(args: argparse.Namespace) -> int:
    from jetkafka.ops._group_admin import list_groups
    from jetkafka.ops._tables import format_table

    groups = list_groups(load_command_config(args), with_lag=not args.no_lag)
    if args.json:
        print_json({"groups": [g.to_dict() for g in groups]})
        return 0
    if not groups:
        print("no groups under this chroot")
        return 0
    rows = [
        (g.group, len(g.members), ",".join(g.topics) or None, g.partitions, g.lag, ",".join(m.id for m in g.members) or None)
        for g in groups
    ]
    for line in format_table(("GROUP", "MEMBERS", "TOPICS", "PARTITIONS", "LAG", "MEMBER IDS"), rows, right={1, 3, 4}):
        print(line)
    for g in groups:
        if g.missing_topics:
            print(f"note: group {g.group}: topic(s) {', '.join(g.missing_topics)} not on the brokers; their lag is not counted")
    return 0


def _print_changes(changes: Sequence[Any], header: str, as_json: bool, payload: dict[str, Any]) -> None:
    from jetkafka.ops._tables import format_table

    if as_json:
        print_json({**payload, "changes": [c.to_dict() for c in changes]})
        return
    print(header)
    if changes:
        rows = [(c.topic, c.partition, c.old, c.new) for c in changes]
        for line in format_table(("TOPIC", "PARTITION", "OLD", "NEW"), rows, right={1, 2, 3}):
            print("  " + line)


def cmd_offsets_delete(args: argparse.Namespace) -> int:
    from jetkafka.ops._group_admin import delete_offsets

    config = load_command_config(args)
    group = _group(args, config.channel.group)
    changes = delete_offsets(config.zookeeper, group, args.topic, dry_run=args.dry_run)
    count = len(changes)
    if args.dry_run:
        header = f"dry run, nothing changed: would delete {count} committed offset(s) of group {group}"
    else:
        header = f"deleted {count} committed offset(s) of group {group}"
    _print_changes(changes, header, args.json, {"group": group, "dry_run": args.dry_run})
    return 0


def cmd_offsets_export(args: argparse.Namespace) -> int:
    from jetkafka.ops._group_admin import export_offsets
    from jetkafka.ops._offsets_file import dump_offsets_file

    if args.to_kafka_group is None and args.dry_run:
        raise JetkafkaError("--dry-run goes with --to-kafka-group G; an export to a file changes nothing anyway")
    if args.to_kafka_group is not None and args.output:
        raise JetkafkaError("give --to-kafka-group G or --output FILE, not both")
    config = load_command_config(args)
    group = _group(args, config.channel.group)
    if args.to_kafka_group is not None:
        from jetkafka.kafka_groups._commands import export_to_kafka_group_command

        return export_to_kafka_group_command(config, group, args.to_kafka_group, args.topic, args.dry_run)
    offsets = export_offsets(config.zookeeper, group, args.topic)
    text = dump_offsets_file(group, offsets)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
        count = sum(len(partitions) for partitions in offsets.values())
        print(f"wrote {count} offset(s) of group {group} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_offsets_import(args: argparse.Namespace) -> int:
    from jetkafka.ops._group_admin import import_offsets
    from jetkafka.ops._offsets_file import read_offsets_file

    if (args.file is None) == (args.from_kafka_group is None):
        given = "both a FILE and --from-kafka-group" if args.file is not None else "neither a FILE nor --from-kafka-group"
        raise JetkafkaError(
            f"{given} given: give one, a FILE made by `jetkafka offsets export` or --from-kafka-group G"
        )
    config = load_command_config(args)
    group = _group(args, config.channel.group)
    if args.from_kafka_group is not None:
        from jetkafka.kafka_groups._commands import import_from_kafka_group_command

        return import_from_kafka_group_command(config, group, args.from_kafka_group, args.dry_run, args.json)
    offsets = read_offsets_file(args.file)
    changes = import_offsets(config.zookeeper, group, offsets, dry_run=args.dry_run)
    source = f"{args.file} (exported from group {offsets.group})"
    if args.dry_run:
        header = f"dry run, nothing changed: would write {len(changes)} offset(s) from {source} into group {group}"
    else:
        header = f"wrote {len(changes)} offset(s) from {source} into group {group}"
    _print_changes(changes, header, args.json, {"group": group, "source_group": offsets.group, "dry_run": args.dry_run})
    return 0

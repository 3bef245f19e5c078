"""``jetkafka offsets import --from-kafka-group G`` and ``offsets export --to-kafka-group G``:
the plan printed as a table (or JSON), the moves in :mod:`jetkafka.kafka_groups._moves`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from jetkafka.config import JetkafkaConfig
from jetkafka.kafka_groups._moves import GroupMove, export_to_kafka_group, import_from_kafka_group
from jetkafka.ops._command_line import print_json
from jetkafka.ops._tables import format_table


def print_moves(moves: Sequence[GroupMove], header: str, as_json: bool, payload: dict[str, object]) -> None:
    if as_json:
        print_json({**payload, "changes": [m.to_dict() for m in moves]})
        return
    print(header)
    rows = [(m.topic, m.partition, m.old, m.new, m.note or None) for m in moves]
    for line in format_table(("TOPIC", "PARTITION", "OLD", "NEW", "NOTE"), rows, right={1, 2, 3}):
        print("  " + line)


def import_from_kafka_group_command(config: JetkafkaConfig, group: str, kafka_group: str, dry_run: bool, as_json: bool) -> int:
    moves = import_from_kafka_group(config, group, kafka_group, dry_run=dry_run)
    done = "dry run, nothing changed: would write" if dry_run else "wrote"
    header = f"{done} {len(moves)} offset(s) of Kafka group {kafka_group} into group {group} (OLD: the group's before)"
    print_moves(moves, header, as_json, {"group": group, "kafka_group": kafka_group, "dry_run": dry_run})
    return 0


def export_to_kafka_group_command(
    config: JetkafkaConfig, group: str, kafka_group: str, topics: Sequence[str] | None, dry_run: bool
) -> int:
    moves = export_to_kafka_group(config, group, kafka_group, tuple(topics) if topics else None, dry_run=dry_run)
    written = sum(1 for m in moves if m.written)
    done = "dry run, nothing changed: would write" if dry_run else "wrote"
    header = f"{done} {written} offset(s) of group {group} into Kafka group {kafka_group} (OLD: {kafka_group}'s before)"
    print_moves(moves, header, False, {})
    if not dry_run:
        print(f"a consumer of Kafka group {kafka_group} now starts where group {group} stopped", file=sys.stderr)
    return 0


__all__ = ["export_to_kafka_group_command", "import_from_kafka_group_command", "print_moves"]

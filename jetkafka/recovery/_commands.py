"""``jetkafka recovery list|cancel``: the recovery ranges of a group, seen and cancelled from any machine.

``list`` reads the recovery nodes (and the owner of each partition) from ZooKeeper and never
writes. ``cancel`` removes the ranges of the chosen partitions and says how many events will
therefore not be recovered.

Guarantees: ``cancel`` writes each node at the version it read, without a lease (no instance
has to stop): an instance that stores progress at the same moment loses the race, re-reads the
node and goes on from it, so a cancel is never undone by a late write, and at most the one batch
that instance had in hand is processed after the cancel. Failure modes: ZooKeeper unreachable
raises :class:`~jetkafka.errors.ConnectError`; a malformed node is reported and left alone.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from jetkafka.config import JetkafkaConfig
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._session import zookeeper_session
from jetkafka.errors import JetkafkaError
from jetkafka.ops._command_line import (
    add_config_options,
    add_topic_option,
    load_command_config,
    partition_numbers,
    print_json,
)
from jetkafka.recovery import _ranges as rng
from jetkafka.recovery._ledger import Change, RecoveryLedger, RecoveryRecord

__all__ = ["PartitionRecovery", "cancel_recovery", "list_recovery", "register"]


@dataclass(frozen=True)
class PartitionRecovery:
    topic: str
    partition: int
    owner: str | None
    record: RecoveryRecord
    error: str | None = None  # a node that cannot be read (left alone)

    def to_dict(self) -> dict[str, Any]:
        r = self.record
        return {
            "topic": self.topic,
            "partition": self.partition,
            "owner": self.owner,
            "error": self.error,
            "ranges": [list(x) for x in r.ranges],
            "remaining": r.remaining,
            "lost": r.lost,
            "capped": r.capped,
            "recovered": r.recovered,
            "by": r.by or None,
            "at": r.at or None,
        }


def _topics(config: JetkafkaConfig, topics: Sequence[str] | None) -> list[str]:
    chosen = list(topics) if topics else list(config.channel.topics)
    unknown = [t for t in chosen if t not in config.channel.topics]
    if unknown:
        raise JetkafkaError(
            f"topic(s) {', '.join(unknown)} not in channel.topics ({', '.join(config.channel.topics)}) of the "
            "configuration; pass one of those with --topic"
        )
    return chosen


def list_recovery(config: JetkafkaConfig, topics: Sequence[str] | None = None) -> list[PartitionRecovery]:
    """Every partition of ``topics`` (default: ``channel.topics``) with a recovery node."""
    paths = GroupPaths(config.channel.group)
    out = []
    with zookeeper_session(config.zookeeper) as client:
        ledger = RecoveryLedger(client, paths, "jetkafka-recovery-list")
        owners = PartitionOwnership(client, paths, "")
        for topic in _topics(config, topics):
            owned = owners.owners(topic)
            for p in ledger.partitions(topic):
                try:
                    out.append(PartitionRecovery(topic, p, owned.get(p), ledger.read(topic, p).record))
                except ValueError as exc:
                    out.append(PartitionRecovery(topic, p, owned.get(p), RecoveryRecord(), str(exc)))
    return out


def _cancelling(seen: list[RecoveryRecord]) -> Change:
    """A ledger change that removes every range, appending each record it is applied to to
    ``seen``: after a lost race it is applied again, so the last one is what the cancel removed."""

    def cancel(record: RecoveryRecord) -> RecoveryRecord:
        seen.append(record)
        return replace(record, ranges=())

    return cancel


def cancel_recovery(
    config: JetkafkaConfig, topics: Sequence[str] | None = None, partitions: Sequence[int] | None = None
) -> list[PartitionRecovery]:
    """Remove the recovery ranges of the chosen partitions; returns what each held when cancelled.

    A node that cannot be read is left alone and returned with ``error`` set.
    """
    paths = GroupPaths(config.channel.group)
    out = []
    with zookeeper_session(config.zookeeper) as client:
        ledger = RecoveryLedger(client, paths, f"jetkafka-recovery-cancel-{int(time.time())}")
        owners = PartitionOwnership(client, paths, "")
        for topic in _topics(config, topics):
            owned = owners.owners(topic)
            for p in ledger.partitions(topic):
                if partitions is not None and p not in partitions:
                    continue
                seen: list[RecoveryRecord] = []
                try:
                    ledger.update((topic, p), _cancelling(seen))
                except ValueError as exc:
                    out.append(PartitionRecovery(topic, p, owned.get(p), RecoveryRecord(), str(exc)))
                    continue
                if seen and seen[-1].ranges:
                    out.append(PartitionRecovery(topic, p, owned.get(p), seen[-1]))
    return out


# -- the command line ------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``recovery`` with ``list`` and ``cancel`` to the main parser's subparsers."""
    recovery = subparsers.add_parser("recovery", help="show or cancel background recovery of backlogs")
    commands = recovery.add_subparsers(dest="recovery_command", metavar="{list,cancel}", required=True)

    show = commands.add_parser("list", help="recovery ranges, remaining and lost events per partition")
    add_config_options(show)
    add_topic_option(show)
    show.set_defaults(func=cmd_list)

    cancel = commands.add_parser(
        "cancel",
        help="drop recovery ranges: their events will not be processed",
        description=(
            "Remove the recovery ranges of the group's partitions (all, or those chosen). Safe while "
            "instances run: an instance recovering a partition stops after its batch in hand."
        ),
    )
    add_config_options(cancel)
    add_topic_option(cancel, "topic")
    cancel.add_argument("--partitions", type=partition_numbers, metavar="P,P", help="only these partitions (default: all)")
    cancel.set_defaults(func=cmd_cancel)


def cmd_list(args: argparse.Namespace) -> int:
    config = load_command_config(args)
    found = list_recovery(config, args.topic)
    remaining = sum(f.record.remaining for f in found)
    if args.json:
        print_json(
            {"group": config.channel.group, "remaining": remaining, "partitions": [f.to_dict() for f in found]}
        )
        return 0
    print(f"group {config.channel.group}: {len(found)} partition(s) with recovery ranges, {remaining} events to recover")
    if found:
        from jetkafka.ops._tables import format_table

        rows = [
            (f.topic, f.partition, f.owner, f.record.remaining, f.record.lost, f.record.capped, f.record.recovered,
             f"unreadable: {f.error}" if f.error else rng.describe(f.record.ranges))
            for f in found
        ]
        header = ("TOPIC", "PARTITION", "OWNER", "REMAINING", "LOST", "CAPPED", "RECOVERED", "RANGES")
        for line in format_table(header, rows, right={1, 3, 4, 5, 6}):
            print(line)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    config = load_command_config(args)
    cancelled = cancel_recovery(config, args.topic, args.partitions)
    total = sum(c.record.remaining for c in cancelled)
    if args.json:
        print_json(
            {"group": config.channel.group, "cancelled": total, "partitions": [c.to_dict() for c in cancelled]}
        )
        return 0
    for c in cancelled:
        if c.error:
            print(f"{c.topic}[{c.partition}]: left alone: {c.error}; fix or delete the node by hand")
            continue
        print(
            f"{c.topic}[{c.partition}]: cancelled {c.record.remaining} events in {len(c.record.ranges)} range(s): "
            f"{rng.describe(c.record.ranges)}"
        )
    done = [c for c in cancelled if not c.error]
    print(f"cancelled: {total} events in {len(done)} partition(s) will not be recovered")
    return 0

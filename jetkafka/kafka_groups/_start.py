"""Where a partition without a jetkafka offset starts under ``auto_offset_reset: kafka-group``.

The switch-over of a deployment from a Kafka consumer group to jetkafka in one configuration
change: each partition the jetkafka group never committed starts at the offset the Kafka group
(``channel.start_kafka_group``, default the mirror group) committed, clamped to the partition's
log; a partition the Kafka group never committed either starts at the earliest offset, so no
record is skipped. The offset is then committed in ZooKeeper before anything is fetched (see
:mod:`jetkafka.channel._start_offsets`), so the Kafka group is read once per partition: later
owners start at jetkafka's own offset whatever the Kafka group does meanwhile.

Failure modes: the Kafka group's offsets cannot be read (broker unreachable, ACL, a broker
without group offsets): :class:`~jetkafka.kafka_groups.KafkaGroupError` is raised and the
partitions are not started, rather than started at a guess; the channel gives them up and
takes them again at a later rebalance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from jetkafka.config import JetkafkaConfig
from jetkafka.kafka_groups._group_offsets import KafkaGroupOffsets

KAFKA_GROUP = "kafka-group"


def start_fallback(config: JetkafkaConfig) -> str:
    """Where a partition a Kafka group never committed starts: ``channel.auto_offset_reset``
    when it is earliest or latest, else earliest (nothing skipped)."""
    reset = config.channel.auto_offset_reset
    return reset if reset in ("earliest", "latest") else "earliest"


@dataclass(frozen=True)
class GroupStart:
    """A partition's start offset, and where it came from (for the log line)."""

    offset: int
    source: str


def kafka_group_starts(
    groups: KafkaGroupOffsets,
    group: str,
    topic: str,
    partitions: Sequence[int],
    log_ends: Callable[[bool], Mapping[int, int]],
) -> dict[int, GroupStart]:
    """Each partition's start: Kafka group ``group``'s committed offset, clamped into the log
    (``log_ends(earliest)`` gives the low or high watermarks), else the earliest offset."""
    # No look at the group's state here (whether its application still runs): librdkafka 2.x
    # can abort the process when an admin request to a group coordinator times out while the
    # broker goes down, and this runs inside every instance. The commands warn instead.
    found = groups.committed(group, {topic: partitions})
    low = log_ends(True)
    high = log_ends(False) if found else {}
    out = {}
    for p in partitions:
        offset = found.get((topic, p))
        if offset is None:
            out[p] = GroupStart(low[p], f"earliest offset (Kafka group {group} has no offset)")
        elif offset < low[p]:
            out[p] = GroupStart(low[p], f"earliest offset (Kafka group {group}'s {offset} is before the log start)")
        elif offset > high[p]:
            out[p] = GroupStart(high[p], f"log end (Kafka group {group}'s {offset} is past it)")
        else:
            out[p] = GroupStart(offset, f"Kafka group {group}'s offset")
    return out


__all__ = ["KAFKA_GROUP", "GroupStart", "kafka_group_starts", "start_fallback"]

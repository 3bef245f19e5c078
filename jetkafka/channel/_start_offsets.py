"""Where a partition that nobody ever committed starts, committed at once.

A partition taken with no committed offset starts at the low or high watermark
(``channel.auto_offset_reset``), or at a Kafka consumer group's offset (``kafka-group``, see
:mod:`jetkafka.kafka_groups._start`), and that offset is committed before anything is fetched, so
an owner that takes the partition later starts at the same place, never at a newer "latest".

The partitions a rebalance took are handled together: one ListOffsets request per topic and
one fenced ZooKeeper transaction per chunk, instead of two round trips per partition. A
transaction that fails (a partition lost meanwhile) is retried one partition at a time, so one
lost partition does not hold up the others.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from jetkafka.channel._fetcher import Fetcher
from jetkafka.config import JetkafkaConfig
from jetkafka.coordination._errors import CommitUncertain
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import Lease
from jetkafka.errors import CommitFenced
from jetkafka.events import Key
from jetkafka.kafka_groups._group_offsets import KafkaGroupOffsets
from jetkafka.kafka_groups._start import KAFKA_GROUP, kafka_group_starts

log = logging.getLogger("jetkafka.channel")


CHUNK = 256  # partitions per transaction: well inside ZooKeeper's request size limit


def commit_start_offsets(
    leases: list[Lease],
    fetcher: Fetcher,
    store: OffsetStore,
    config: JetkafkaConfig,
    on_committed: Callable[[Key, int], None],
) -> dict[Key, int]:
    """Commit the starting offset of each lease; returns those committed (the others failed, logged).

    Raises what the look-up raises (nothing committed then): the broker's watermarks, or with
    ``auto_offset_reset: kafka-group`` the Kafka group's offsets, could not be read.
    """
    reset = config.channel.auto_offset_reset
    targets: dict[Key, int] = {}
    sources: dict[Key, str] = {}
    by_topic: dict[str, list[int]] = {}
    for lease in leases:
        by_topic.setdefault(lease.topic, []).append(lease.partition)
    # One admin client per look-up, bounded by the channel's broker timeout: the rebalance
    # thread waits for it, and in a folder of channels that thread is the process's.
    groups = KafkaGroupOffsets(config.kafka, config.channel.kafka_connection_timeout_s) if reset == KAFKA_GROUP else None
    for topic, partitions in by_topic.items():
        if groups is not None:
            starts = kafka_group_starts(
                groups,
                config.start_kafka_group,
                topic,
                partitions,
                functools.partial(fetcher.log_ends, topic, partitions),
            )
            for p, start in starts.items():
                targets[(topic, p)] = start.offset
                sources[(topic, p)] = start.source
            continue
        for p, offset in fetcher.log_ends(topic, partitions, reset == "earliest").items():
            targets[(topic, p)] = offset
            sources[(topic, p)] = f"{reset} offset"
    committed: dict[Key, int] = {}
    for i in range(0, len(leases), CHUNK):
        chunk = {lease.key: (lease, targets[lease.key]) for lease in leases[i : i + CHUNK]}
        try:
            store.commit_many(chunk)
            committed.update({key: offset for key, (_, offset) in chunk.items()})
        except (CommitFenced, CommitUncertain):
            for key, (lease, offset) in chunk.items():
                try:
                    store.commit(lease, offset)
                    committed[key] = offset
                except (CommitFenced, CommitUncertain) as exc:
                    log.error("%s[%d]: initial commit failed (%s); giving it up", key[0], key[1], exc)
    for key, offset in sorted(committed.items()):
        on_committed(key, offset)
        log.info("%s[%d]: no committed offset; starting at %s %d", key[0], key[1], sources[key], offset)
    return committed

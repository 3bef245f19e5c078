"""A consumer group as ZooKeeper and the brokers see it: ``jetkafka status`` and ``offsets show``.

Runs anywhere ZooKeeper and Kafka can be reached; no channel needs to run. It reads, and never
writes: the live instances (``ids``), each partition's owner (``owners``) and committed offset
(``offsets``) and what its owner reports when it does not move on (``failures``,
:mod:`jetkafka.ops._failure_reports`) from ZooKeeper, and each partition's watermarks from the
brokers.

Guarantees and limits: every value is read once, in the order instances, owners, offsets,
watermarks, without a snapshot across them; on a busy group an offset may have moved between
two reads, so ``lag`` is exact for the moment of its own reads only. ``lag`` is
``high - committed``; it is negative when the committed offset lies beyond the log end (the
topic was recreated or truncated) and ``None`` when nothing was committed yet.

Failure modes: ZooKeeper or Kafka unreachable raises :class:`~jetkafka.errors.ConnectError`
naming the address; a topic missing on the cluster raises :class:`~jetkafka.errors.TopicNotFound`.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaException, TopicPartition
from kazoo.client import KazooClient

from jetkafka._client_logs import librdkafka_logger
from jetkafka.config import JetkafkaConfig
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._registry import ConsumerInfo, ConsumerRegistry
from jetkafka.coordination._session import zookeeper_session
from jetkafka.errors import ConnectError, TopicNotFound
from jetkafka.kafka_groups._group_offsets import KafkaGroupOffsets
from jetkafka.ops._failure_reports import FailureReport, owned_failure, read_failures, render_failures
from jetkafka.ops._micro_batch_reports import MicroBatchReport, read_reports, render_reports
from jetkafka.ops._tables import format_table
from jetkafka.ordering import CommitPoint

log = logging.getLogger(__name__)

# The broker answers ListOffsets for a time past its last record with this offset.
_OFFSET_END = -1


class BrokerView:
    """Metadata, watermark and time look-ups through one idle consumer (no group, no assignment)."""

    def __init__(self, kafka: Mapping[str, Any], group: str, timeout: float = 10.0) -> None:
        from jetkafka.channel._fetcher import consumer_config

        conf = consumer_config(kafka, group)
        self._bootstrap = str(conf.get("bootstrap.servers", "?"))
        self._timeout = timeout
        self._consumer = Consumer(conf, logger=librdkafka_logger())
        self._kafka = kafka
        self._groups: KafkaGroupOffsets | None = None
        self._groups_checked: set[str] = set()

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> BrokerView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreachable(self, exc: KafkaException, what: str) -> ConnectError:
        return ConnectError(
            f"cannot {what} from Kafka at {self._bootstrap} ({exc.args[0].str() if exc.args else exc}); "
            "check kafka.bootstrap.servers and that the broker runs (for a local one: jetkafka dev up)"
        )

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        try:
            # All topics, never one by name: some brokers create a topic they are asked about.
            meta = self._consumer.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            raise self._unreachable(exc, "read metadata") from None
        counts = {}
        for topic in topics:
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None or not tmeta.partitions:
                raise TopicNotFound(f"topic {topic!r} does not exist on {self._bootstrap}; check the topic name")
            counts[topic] = len(tmeta.partitions)
        return counts

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """``(low, high)``: the oldest offset held, and the offset the next record will get."""
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=self._timeout)
        except KafkaException as exc:
            raise self._unreachable(exc, f"read the watermarks of {topic}[{partition}]") from None
        return int(low), int(high)

    def kafka_group_offsets(self, group: str, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """The offsets Kafka consumer group ``group`` committed for these partitions of ``topic``
        (a partition it never committed is left out)."""
        if self._groups is None:
            self._groups = KafkaGroupOffsets(self._kafka, self._timeout)
        found = self._groups.committed(group, {topic: partitions})
        if group not in self._groups_checked:
            self._groups_checked.add(group)
            live = self._groups.live(group)
            if live is not None:
                log.warning(
                    "Kafka group %s is %s: its application still consumes and commits, so its offsets move on "
                    "after this read and the records in between would be processed twice; stop it first for "
                    "an exact hand-over",
                    group,
                    live,
                )
        return {p: offset for (_, p), offset in found.items()}

    def offsets_for_time(self, topic: str, partitions: Sequence[int], ms: int) -> dict[int, int | None]:
        """Per partition, the first offset whose timestamp is at or after ``ms``; None: no such record."""
        request = [TopicPartition(topic, p, ms) for p in partitions]
        try:
            answer = self._consumer.offsets_for_times(request, timeout=self._timeout)
        except KafkaException as exc:
            raise self._unreachable(exc, f"look up offsets by time of {topic}") from None
        out: dict[int, int | None] = {}
        for tp in answer:
            if tp.error is not None:
                raise ConnectError(f"{topic}[{tp.partition}]: offset look-up by time failed: {tp.error.str()}")
            out[tp.partition] = None if tp.offset == _OFFSET_END or tp.offset < 0 else int(tp.offset)
        return out

    def record_timestamp(self, topic: str, partition: int, offset: int, timeout: float) -> int | None:
        """The timestamp (epoch ms) of the first record at or after ``offset``, read by assigning
        the partition to the idle consumer for one message and unassigning it again (no group
        is joined, nothing is committed). None when the record has no timestamp.

        Raises :class:`LookupError` naming why when no record comes within ``timeout`` seconds
        or the broker answers with an error (the offset out of range, the partition gone).
        """
        self._consumer.assign([TopicPartition(topic, partition, offset)])
        try:
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                msg = self._consumer.poll(left)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    raise LookupError(f"reading offset {offset}: {error.str()}")
                if msg.topic() != topic or msg.partition() != partition or (msg.offset() or 0) < offset:
                    continue  # left over from an earlier assignment
                kind, ms = msg.timestamp()
                return None if kind == TIMESTAMP_NOT_AVAILABLE else int(ms)
            raise LookupError(f"no record at offset {offset} within {timeout:g} s")
        finally:
            self._consumer.unassign()


@dataclass(frozen=True)
class InstanceStatus:
    id: str
    host: str
    pid: int
    started: float
    since: str
    paused: bool
    coordinator: str
    topics: tuple[str, ...]
    partitions: int


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    owner: str | None
    committed: int | None
    low: int
    high: int
    lag: int | None
    # Why the partition does not move on, as its owner reported it; None: it moves on, or is free.
    failure: FailureReport | None = None
    # Offsets finished above ``committed`` (the map a channel.ordering key or none owner commits
    # with it): the next owner skips them.
    finished_above: int = 0

    @property
    def state(self) -> str:
        """``ok``, or the failure's state (``retrying``, ``isolating``, ``halted``); ``-`` when free."""
        if self.failure is not None:
            return self.failure.state
        return "-" if self.owner is None else "ok"


@dataclass(frozen=True)
class GroupStatus:
    """A group as read. ``exists`` is false when ZooKeeper has no node for the group under the
    chroot: no instance ever joined it there (a wrong ``channel.group`` or chroot, or a group
    not started yet)."""

    group: str
    topics: tuple[str, ...]
    instances: tuple[InstanceStatus, ...]
    partitions: tuple[PartitionStatus, ...]
    exists: bool = True
    # Spark processor instances' last micro-batch and totals (jetkafka.ops._micro_batch_reports)
    micro_batches: tuple[MicroBatchReport, ...] = field(default_factory=tuple)

    @property
    def lag(self) -> int:
        """The sum of the known lags; see :attr:`uncommitted` for the partitions it leaves out."""
        return sum(p.lag for p in self.partitions if p.lag is not None)

    @property
    def uncommitted(self) -> int:
        """How many partitions have no committed offset (their lag is unknown)."""
        return sum(1 for p in self.partitions if p.committed is None)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form; its keys are documented in docs/operations.md and kept stable."""
        return {
            "group": self.group,
            "topics": list(self.topics),
            "instances": [{**asdict(i), "topics": list(i.topics)} for i in self.instances],
            "partitions": [asdict(p) for p in self.partitions],
            "lag": self.lag,
            "exists": self.exists,
            "uncommitted": self.uncommitted,
            "micro_batches": [asdict(r) for r in self.micro_batches],
        }


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def read_partitions(
    client: KazooClient, broker: BrokerView, group: str, topics: Sequence[str]
) -> list[PartitionStatus]:
    """Owner, committed offset, watermarks, lag and the owner's failure report of every
    partition of ``topics``."""
    paths = GroupPaths(group)
    counts = broker.partition_counts(topics)
    ownership = PartitionOwnership(client, paths, "")
    store = OffsetStore(client, paths)
    failures = read_failures(client, paths)
    out = []
    for topic in topics:
        owners = ownership.owners(topic)
        committed = store.read_all(topic)
        for p in range(counts[topic]):
            low, high = broker.watermarks(topic, p)
            offset = committed.get(p)
            out.append(
                PartitionStatus(
                    topic=topic,
                    partition=p,
                    owner=owners.get(p),
                    committed=None if offset is None else int(offset),
                    low=low,
                    high=high,
                    lag=None if offset is None else high - offset,
                    failure=owned_failure(failures, owners.get(p), (topic, p)),
                    finished_above=offset.finished_count if isinstance(offset, CommitPoint) else 0,
                )
            )
    return out


def group_status(config: JetkafkaConfig, topics: Sequence[str] | None = None) -> GroupStatus:
    """The group of ``config`` (its ``channel.group``), over ``topics`` (default: ``channel.topics``)."""
    group = config.channel.group
    topics = tuple(topics or config.channel.topics)
    with zookeeper_session(config.zookeeper) as client, BrokerView(config.kafka, group) as broker:
        return read_group_status(client, broker, group, topics)


def read_group_status(client: KazooClient, broker: BrokerView, group: str, topics: Sequence[str]) -> GroupStatus:
    """:func:`group_status` through a started client and a broker view the caller keeps
    (``jetkafka status --watch`` reads through the same ones each time)."""
    exists = client.exists(GroupPaths(group).root) is not None
    live = ConsumerRegistry(client, GroupPaths(group)).live()
    partitions = read_partitions(client, broker, group, topics)
    status = assemble_status(group, topics, live.values(), partitions, exists=exists)
    reports = tuple(r for r in read_reports(client, GroupPaths(group)) if r.consumer in live)
    return replace(status, micro_batches=reports)


def assemble_status(
    group: str,
    topics: Sequence[str],
    live: Iterable[ConsumerInfo],
    partitions: Sequence[PartitionStatus],
    exists: bool = True,
) -> GroupStatus:
    """The status of ``group`` from its live members and its partitions as read."""
    held: dict[str, int] = {}
    for p in partitions:
        if p.owner is not None:
            held[p.owner] = held.get(p.owner, 0) + 1
    instances = tuple(
        InstanceStatus(
            id=info.consumer_id,
            host=info.host,
            pid=info.pid,
            started=info.started,
            since=_iso(info.started),
            paused=info.paused,
            coordinator=info.coordinator,
            topics=info.topics,
            partitions=held.get(info.consumer_id, 0),
        )
        for info in sorted(live, key=lambda i: (i.started, i.consumer_id))
    )
    return GroupStatus(group, tuple(topics), instances, tuple(partitions), exists)


def show_offsets(config: JetkafkaConfig, topics: Sequence[str] | None = None) -> GroupStatus:
    """Committed offsets, owners, watermarks and lag of ``topics`` (default ``channel.topics``),
    without the instances."""
    group = config.channel.group
    topics = tuple(topics or config.channel.topics)
    with zookeeper_session(config.zookeeper) as client, BrokerView(config.kafka, group) as broker:
        exists = client.exists(GroupPaths(group).root) is not None
        partitions = read_partitions(client, broker, group, topics)
    return GroupStatus(group, topics, (), tuple(partitions), exists)


# -- rendering ---------------------------------------------------------------------------------


def _age(started: float, now: float) -> str:
    seconds = max(0, int(now - started))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def render_partitions(partitions: Sequence[PartitionStatus], now: float | None = None) -> list[str]:
    """The partition table, then the partitions that do not move on with their details.

    A column ``DONE ABOVE`` (and a line saying what it is) comes only when a partition's commit
    carries finished offsets above it (``channel.ordering: key | none``)."""
    if any(p.finished_above for p in partitions):
        lines = format_table(
            ("TOPIC", "PARTITION", "OWNER", "COMMITTED", "DONE ABOVE", "LOW", "HIGH", "LAG", "STATE"),
            (
                (p.topic, p.partition, p.owner, p.committed, p.finished_above, p.low, p.high, p.lag, p.state)
                for p in partitions
            ),
            right={1, 3, 4, 5, 6, 7},
        )
        lines.append(
            "DONE ABOVE: offsets above COMMITTED already processed (channel.ordering key or none); "
            "the next owner skips them"
        )
    else:
        lines = format_table(
            ("TOPIC", "PARTITION", "OWNER", "COMMITTED", "LOW", "HIGH", "LAG", "STATE"),
            ((p.topic, p.partition, p.owner, p.committed, p.low, p.high, p.lag, p.state) for p in partitions),
            right={1, 3, 4, 5, 6},
        )
    failing = [(p.topic, p.partition, p.failure) for p in partitions if p.failure is not None]
    return lines + render_failures(failing, time.time() if now is None else now)


def describe_lag(status: GroupStatus) -> str:
    """The headline's lag: a number only as far as offsets were committed.

    A group that does not exist, or has never committed, has no lag to speak of: "total lag 0"
    would read as "caught up".
    """
    if not status.exists:
        return (
            "does not exist in ZooKeeper: no instance ever joined it under this chroot "
            "(check channel.group and the chroot of zookeeper.connect); lag unknown"
        )
    if status.partitions and status.uncommitted == len(status.partitions):
        return "nothing committed yet, lag unknown"
    lag = f"total lag {status.lag}"
    if status.uncommitted:
        lag += f" ({status.uncommitted} partition(s) never committed, not counted)"
    return lag


def render_status(status: GroupStatus, now: float | None = None) -> str:
    now = time.time() if now is None else now
    owned = sum(1 for p in status.partitions if p.owner is not None)
    if status.exists:
        headline = (
            f"group {status.group}: {len(status.instances)} instance(s), "
            f"{owned}/{len(status.partitions)} partitions owned, {describe_lag(status)}"
        )
    else:
        headline = f"group {status.group}: {describe_lag(status)}"
    lines = [headline, ""]
    if status.instances:
        lines += format_table(
            ("INSTANCE", "HOST", "PID", "SINCE", "PAUSED", "PARTITIONS"),
            (
                (i.id, i.host, i.pid, f"{i.since} ({_age(i.started, now)} ago)", "yes" if i.paused else "no", i.partitions)
                for i in status.instances
            ),
            right={2, 5},
        )
    else:
        lines.append("no live instances")
    lines.append("")
    lines += render_partitions(status.partitions, now)
    if status.micro_batches:
        lines += ["", *render_reports(status.micro_batches, now)]
    return "\n".join(lines)


def render_offsets(status: GroupStatus) -> str:
    return "\n".join(
        [
            f"group {status.group}: {'committed offsets, ' if status.exists else ''}{describe_lag(status)}",
            "",
            *render_partitions(status.partitions),
        ]
    )


__all__ = [
    "BrokerView",
    "GroupStatus",
    "InstanceStatus",
    "PartitionStatus",
    "assemble_status",
    "describe_lag",
    "group_status",
    "read_group_status",
    "read_partitions",
    "render_offsets",
    "render_status",
    "show_offsets",
]

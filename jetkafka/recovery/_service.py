"""Recovery for one channel: the decision at take-over, and the recovery worker's life cycle.

At take-over of a partition with a committed offset, :meth:`RecoveryService.start_offset` looks
up the watermarks. When the backlog ``high - committed`` exceeds ``recovery.max_partition_lag``,
live reading starts at ``high - max_partition_lag`` and the gap ``[committed, high -
max_partition_lag)`` is appended to the partition's recovery ranges, in ONE ZooKeeper
transaction with the new start offset (fenced by the new lease): either both are stored or
neither, so a crash right after a take-over never skips a gap unrecorded.
``recovery.max_records`` keeps only the newest part of a larger gap; the rest is logged as an
error and counted (``capped``). Offsets the broker no longer holds are counted as lost.

Processor choice (:func:`choose_processor`), so that live and recovery batches of one partition
never overlap in one processor object unless the application asked for it:

1. ``recovery.processor`` in YAML: its own instance;
2. ``InboundChannel(..., recovery_processor=obj)``: that object;
3. the channel's processor was built from ``processor.class``: a second instance built from the
   same section;
4. otherwise (a processor object given to the channel and nothing else): the same object, whose
   callbacks for one partition may then run at the same time on a live worker thread and on the
   recovery thread (for different offsets).

Separate instances get ``on_start`` and ``on_stop`` like the live processor; their context
refuses ``commit`` (live offsets are the live path's). The Spark micro-batch processor, which
commits live offsets for whole micro-batches, is refused as a recovery processor
(:class:`~jetkafka.errors.ConfigError` at start).

Failure modes: watermarks that cannot be read, or a recovery node that cannot be parsed, start
the partition at its committed offset (logged as an error; the backlog is read live, nothing is
skipped). A take-over transaction refused by the fence or lost to a disconnection returns
``None``: the channel gives the partition up, as it does when its initial commit fails.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kazoo.client import TransactionRequest
from kazoo.exceptions import KazooException

from jetkafka.channel._add_ons import ChannelAddOn
from jetkafka.channel._context import ChannelContext
from jetkafka.coordination._errors import CommitUncertain
from jetkafka.coordination._ownership import Lease
from jetkafka.errors import CommitFenced, ConfigError, ConnectError, JetkafkaError
from jetkafka.events import Key
from jetkafka.processors._base import BatchEventProcessor
from jetkafka.processors._loading import load_processor
from jetkafka.recovery import _ranges as rng
from jetkafka.recovery._ledger import RecoveryLedger, RecoveryRecord
from jetkafka.recovery._reader import RangeReader
from jetkafka.recovery._worker import RecoveryWorker

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel

log = logging.getLogger("jetkafka.recovery")


@dataclass(frozen=True)
class GapPlan:
    """Where live reading starts after a take-over, and what goes to recovery."""

    start: int  # the offset committed for live reading
    gap: rng.Range | None  # [from, to) appended to the recovery ranges
    lost: int  # offsets below the low watermark: gone before anyone could read them
    capped: int  # offsets left out by recovery.max_records (the oldest part of the gap)


def plan_gap(committed: int, low: int, high: int, max_lag: int, max_records: int | None) -> GapPlan:
    """The take-over decision for a partition with a committed offset (pure)."""
    if high - committed <= max_lag:
        return GapPlan(committed, None, 0, 0)
    first = max(committed, low)
    # With fewer than max_lag records left on the broker, live reading starts at the oldest one.
    start = max(high - max_lag, first)
    if start == first:
        return GapPlan(start, None, first - committed, 0)
    gap, capped = rng.cap((first, start), max_records)
    return GapPlan(start, gap, first - committed, capped)


def choose_processor(
    channel: RunningChannel, live: BatchEventProcessor, given: BatchEventProcessor | None
) -> BatchEventProcessor:
    """The processor recovery batches go to, ``live`` being the channel's (see the module
    docstring for the order)."""
    section = channel.config.recovery.processor
    if section is not None:
        chosen = load_processor(section, channel.pythonpath)
    elif given is not None:
        chosen = given
    elif channel.config.processor is not None and type(live) is _named_class(channel.config.processor.class_path):
        chosen = load_processor(channel.config.processor, channel.pythonpath)
    else:
        chosen = live
    _refuse_live_committers(channel, chosen)
    return chosen


def _refuse_live_committers(channel: RunningChannel, processor: BatchEventProcessor) -> None:
    """Spark micro-batches commit live offsets for whatever they gathered: never recovery events."""
    spark = sys.modules.get("jetkafka.spark._microbatch")
    if spark is not None and isinstance(processor, spark.SparkMicroBatchProcessor):
        raise ConfigError(
            channel.config.source,
            "recovery.processor",
            "recovery batches cannot go to SparkMicroBatchProcessor: it commits the live offsets of the "
            "partitions it gathered, which recovery offsets would move back",
            "set recovery.processor to a processor that handles one batch at a time (events.recovery is True)",
        )


class RecoveryContext(ChannelContext):
    """The context of a separate recovery processor: everything but committing live offsets."""

    def commit(
        self,
        offsets: Mapping[Key, int],
        extra: Callable[[TransactionRequest], None] | None = None,
        holds: Mapping[Key, Lease] | None = None,
        expected: Mapping[Key, int | None] | None = None,
    ) -> None:
        """Refused, whatever the arguments: raises :class:`JetkafkaError` and writes nothing.

        It takes the arguments of :meth:`ChannelContext.commit` (``expected`` included) so that
        a processor written for the live path gets this refusal, not a ``TypeError``.
        """
        raise JetkafkaError(
            "a recovery processor cannot commit live offsets (ChannelContext.commit); return "
            "BatchResponse.advance() or call source.commit(offset) to store recovery progress"
        )


def _named_class(class_path: str) -> Any:
    """The class ``module:Name`` names, if its module is imported already; else None."""
    module_name, _, attrs = class_path.partition(":")
    target: Any = sys.modules.get(module_name)
    for attr in attrs.split("."):
        target = getattr(target, attr, None)
    return target


class RecoveryService:
    """Recovery for one start of a channel: built and started at the channel's start (before
    it joins its group), stopped at its teardown. ``start_offset`` runs on the rebalance
    thread, ``partition_removed`` on the worker thread of the partition's turn."""

    def __init__(self, channel: RunningChannel, processor: BatchEventProcessor, live: BatchEventProcessor) -> None:
        self.channel = channel
        self.config = channel.config.recovery
        self.processor = processor
        self.separate = processor is not live
        self.ledger = RecoveryLedger(channel.zookeeper, channel.paths, channel.consumer_id)
        kafka, group = channel.config.kafka, channel.config.channel.group
        self.worker = RecoveryWorker(
            channel,
            self.ledger,
            processor,
            lambda: RangeReader(kafka, group, self.config.batch_max_events),
        )

    @classmethod
    def for_channel(
        cls, channel: RunningChannel, live: BatchEventProcessor, given: BatchEventProcessor | None = None
    ) -> RecoveryService | None:
        """A started service when ``recovery.max_partition_lag`` is set, else None; ``live`` is
        the channel's processor, ``given`` the one passed for recovery (if any)."""
        if channel.config.recovery.max_partition_lag is None:
            return None
        service = cls(channel, choose_processor(channel, live, given), live)
        service.start()
        return service

    def start(self) -> None:
        if self.separate:
            channel = self.channel
            self.processor.on_start(RecoveryContext(channel, channel.zookeeper, channel.paths))
        self.worker.start()
        log.info(
            "recovery on for group %s: max_partition_lag %d, max_records %s, max_rate %d events/s, processor %s%s",
            self.channel.config.channel.group,
            self.config.max_partition_lag,
            self.config.max_records,
            self.config.max_rate,
            type(self.processor).__name__,
            "" if self.separate else " (shared with live batches)",
        )

    def stop(self) -> None:
        self.worker.stop()
        if self.separate:
            try:
                self.processor.on_stop()
            except Exception:
                log.exception("recovery processor %s.on_stop raised", type(self.processor).__name__)

    def partition_removed(self, lease: Lease) -> None:
        """Before a partition's owner node is deleted: its recovery batch in hand is finished first."""
        self.worker.partition_removed(lease, self.channel.config.channel.shutdown_timeout_s)

    def start_offset(self, lease: Lease) -> int | None:
        """Where live reading of a newly taken partition starts; None when the take-over commit failed."""
        committed = lease.committed
        assert committed is not None and self.config.max_partition_lag is not None
        topic, partition = lease.key
        try:
            low, high = self.channel.watermarks(topic, partition)
        except ConnectError as exc:
            log.warning("%s[%d]: %s; starting at committed offset %d without a recovery check", topic, partition, exc, committed)
            return committed
        plan = plan_gap(committed, low, high, self.config.max_partition_lag, self.config.max_records)
        if plan.start == committed:
            return committed

        def change(record: RecoveryRecord) -> RecoveryRecord:
            ranges = rng.add(record.ranges, plan.gap) if plan.gap else record.ranges
            return replace(record, ranges=ranges, lost=record.lost + plan.lost, capped=record.capped + plan.capped)

        try:
            snap = self.ledger.take_over(self.channel.offsets, lease, plan.start, change)
        except ValueError as exc:
            # Never skip a gap that cannot be recorded: read the backlog live instead.
            log.error("%s[%d]: %s; starting at committed offset %d without recovery", topic, partition, exc, committed)
            return committed
        except (CommitFenced, CommitUncertain, KazooException, RuntimeError) as exc:
            log.error("%s[%d]: take-over commit of offset %d failed (%s); giving it up", topic, partition, plan.start, exc)
            return None
        self.channel.record_commit(lease.key, plan.start)
        self._report(lease, committed, high, plan, snap.record)
        self.worker.wake()
        return plan.start

    def _report(self, lease: Lease, committed: int, high: int, plan: GapPlan, record: RecoveryRecord) -> None:
        topic, partition = lease.key
        if plan.gap is not None:
            log.warning(
                "%s[%d]: %d events behind (committed %d, high watermark %d), more than recovery.max_partition_lag "
                "%d: live reading starts at %d; [%d, %d) is recovered in the background (%d events in %s to recover)",
                topic,
                partition,
                high - committed,
                committed,
                high,
                self.config.max_partition_lag,
                plan.start,
                *plan.gap,
                record.remaining,
                rng.describe(record.ranges),
            )
        if plan.capped:
            assert plan.gap is not None
            log.error(
                "%s[%d]: recovery.max_records %d: the oldest %d events [%d, %d) of the gap will NOT be processed",
                topic,
                partition,
                self.config.max_records,
                plan.capped,
                plan.gap[0] - plan.capped,
                plan.gap[0],
            )
            self.channel.stats.recovery_lost(lease.key, "max_records", plan.capped)
        if plan.lost:
            log.error(
                "%s[%d]: offsets %d..%d are no longer on the broker (low watermark %d); %d events are LOST",
                topic,
                partition,
                committed,
                committed + plan.lost - 1,
                committed + plan.lost,
                plan.lost,
            )
            self.channel.stats.recovery_lost(lease.key, "retention", plan.lost)


class RecoveryAddOn(ChannelAddOn):
    """Recovery as a channel add-on: a :class:`RecoveryService` for each start of the channel
    when ``recovery.max_partition_lag`` is set (none otherwise), deciding where taken partitions
    start and finishing a partition's recovery batch before it is given up.

    ``processor`` is the one given for recovery (``InboundChannel(..., recovery_processor=)``),
    see :func:`choose_processor`. ``start``/``stop`` run on the thread that starts or stops the
    channel; the hooks on the threads :mod:`jetkafka.channel._add_ons` names.
    """

    def __init__(self, processor: BatchEventProcessor | None = None) -> None:
        self.given = processor
        self.service: RecoveryService | None = None

    def start(self, channel: RunningChannel, processor: BatchEventProcessor) -> None:
        self.service = RecoveryService.for_channel(channel, processor, self.given)

    def stop(self) -> None:
        service, self.service = self.service, None
        if service is not None:
            service.stop()

    def start_offset(self, lease: Lease) -> int | None:
        service = self.service
        return lease.committed if service is None else service.start_offset(lease)

    def partition_removed(self, lease: Lease) -> None:
        if (service := self.service) is not None:
            service.partition_removed(lease)

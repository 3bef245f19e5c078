"""SparkMicroBatchProcessor: the channel's events as Spark micro-batches, exactly-once output.

The channel's workers hand each partition's batches to :meth:`on_next_batch`, which converts
them to Arrow and adds them to the open micro-batch; no offset is committed there. A driver
thread closes the micro-batch (``max_events``, ``max_bytes`` or ``max_interval_ms``), records
its offset ranges in ZooKeeper, calls ``fn(df, batch_id)`` and then commits every partition's
offsets together with marking the ranges done. See ``docs/spark.md`` for the guarantees.

Threads: each partition's callbacks (``on_next_batch``, ``on_idle``, ``on_reposition``,
``on_stream_termination``, ``on_exception``) run on the worker holding its turn, one at a time;
state kept per partition (:class:`~jetkafka.spark._chain_start.ChainStarts`) is only touched
there. ``on_start`` / ``on_stop`` run on the thread starting or stopping the channel, around
every resubscribe of a hot deploy: each start gets a fresh collector and driver thread, so
nothing of a stopped driver (its stopping flag, its half-gathered batches) reaches the next one.

A reposition (:meth:`on_reposition`: an offset reset, the out-of-range policy, a halt lifted by
a reset) drops what was gathered from the old position; the partition is registered again at
its next batch, from the new committed offset (:mod:`jetkafka.spark._chain_start`).
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from jetkafka._backoff import backoff_ms
from jetkafka.errors import PartitionLost, ProcessorError
from jetkafka.events import EventBatch, PartitionSource
from jetkafka.ops._micro_batch_reports import MicroBatchReport, publish_report, withdraw_report
from jetkafka.processors._base import BatchEventProcessor, BatchResponse
from jetkafka.spark._arrow import messages_to_arrow, parse_schema
from jetkafka.spark._batch import Bounds, Collector
from jetkafka.spark._chain_start import ChainStarts
from jetkafka.spark._driver import MicroBatchDriver
from jetkafka.spark._fence import fence_parameter
from jetkafka.spark._figures import DriverStats, MicroBatchFigures
from jetkafka.spark._ledger import MicroBatchLedger
from jetkafka.spark._schema_ddl import spark_refused

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jetkafka.channel._context import ChannelContext

log = logging.getLogger("jetkafka.spark")

BatchFunction = Callable[..., Any]  # fn(df, batch_id), or fn(df, batch_id, fence)

# How far a micro-batch grows past max_events while Spark is busy, by default. Measured on the
# example pipeline: the driver's fixed cost per micro-batch is about 0.45 s, so 4x spreads it
# over enough events to matter, and memory stays within a small multiple of what was set.
BACKLOG_GROWTH = 4

def resolve_function(fn: BatchFunction | str, fn_options: Mapping[str, Any] | None = None) -> BatchFunction:
    """``fn`` itself, or the function a "package.module:name" string names.

    With ``fn_options`` the named object is a factory, called with them, that returns the
    function: a YAML file can then configure it (an output path, a table name).
    """
    target: Any = fn
    if isinstance(fn, str):
        module_name, colon, attr_path = fn.partition(":")
        if not colon or not module_name or not attr_path:
            raise ValueError(f"fn {fn!r} is not of the form 'package.module:function'")
        target = importlib.import_module(module_name)
        walked = module_name
        for part in attr_path.split("."):
            if not hasattr(target, part):
                raise ValueError(f"fn {fn!r}: {walked} has no attribute {part!r}")
            target = getattr(target, part)
            walked = f"{walked}.{part}"
    if fn_options is not None:
        target = target(**dict(fn_options))
    function: object = target
    if not callable(function):
        raise ValueError(f"fn must be callable as fn(df, batch_id) or fn(df, batch_id, fence), got {function!r}")
    return function


class SparkMicroBatchProcessor(BatchEventProcessor):
    """Micro-batches over every partition the channel owns, handed to ``fn(df, batch_id)``.

    Options (also as ``processor.options`` in YAML):

    - ``fn``: the batch function, or "package.module:name"; with ``fn_options`` the name is a
      factory called with those options that returns the function. A function taking a third
      parameter (or a keyword ``fence``) also gets a :class:`~jetkafka.spark._fence.BatchFence`.
    - ``max_events`` / ``max_bytes`` / ``max_interval_ms``: a micro-batch closes at the first
      bound reached (bytes of Arrow data; interval counted from its first event). With Spark
      free it never holds more than ``max_events`` events (a worker's batch that does not fit is
      cut), while Spark is busy no more than ``backlog_max_events``; it may exceed ``max_bytes``
      by less than one worker batch.
    - ``backlog_max_events``: while Spark still runs the previous micro-batch, the open one goes
      on taking events up to this many (default 4 × ``max_events``; ``max_bytes`` still bounds
      it): under a backlog, fewer and larger micro-batches. Equal to ``max_events``: a fixed size.
    - ``value_format``: ``binary`` (default), ``text`` (UTF-8 string) or ``json`` (a struct
      parsed with ``schema``, a DDL string such as ``"id STRING, amount DOUBLE"``).
    - ``spark``: a session to use (otherwise one is built from the ``spark:`` section).
    - ``settle_timeout_s``: how long a released partition waits for its batches to commit
      (default: half of ``channel.shutdown_timeout_s``).
    """

    def __init__(
        self,
        fn: BatchFunction | str,
        *,
        fn_options: Mapping[str, Any] | None = None,
        max_events: int = 100_000,
        max_bytes: int = 64 * 1024 * 1024,
        max_interval_ms: int = 2_000,
        backlog_max_events: int | None = None,
        value_format: str = "binary",
        schema: Any = None,
        spark: SparkSession | None = None,
        settle_timeout_s: float | None = None,
    ) -> None:
        # Values substituted from the environment in YAML options arrive as strings.
        max_events, max_bytes, max_interval_ms = int(max_events), int(max_bytes), int(max_interval_ms)
        if max_events < 1:
            raise ValueError(f"max_events must be >= 1, got {max_events}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        if max_interval_ms < 0:
            raise ValueError(f"max_interval_ms must be >= 0, got {max_interval_ms}")
        backlog_max_events = BACKLOG_GROWTH * max_events if backlog_max_events is None else int(backlog_max_events)
        if backlog_max_events < max_events:
            raise ValueError(
                f"backlog_max_events must be >= max_events ({max_events}), got {backlog_max_events}; "
                f"set it to {max_events} for micro-batches of a fixed size"
            )
        self.fn = resolve_function(fn, fn_options)
        self.fence_parameter = fence_parameter(self.fn)
        self.value_format = value_format
        self.schema = parse_schema(schema, value_format)
        self.bounds = Bounds(max_events, max_bytes, max_interval_ms, backlog_max_events)
        self.settle_timeout_s = settle_timeout_s
        self.collector = Collector(self.bounds)
        self._stats = DriverStats()
        self._starts = ChainStarts()
        self._gather_failures: dict[tuple[str, int], int] = {}  # consecutive, per partition
        self._given_spark = spark
        self._own_spark = False
        self.spark: SparkSession | None = spark
        self._context: ChannelContext | None = None
        self._ledger: MicroBatchLedger | None = None
        self._driver: MicroBatchDriver | None = None

    # -- life cycle ----------------------------------------------------------------------------

    def on_start(self, context: ChannelContext) -> None:
        from jetkafka.spark._session import build_session

        ordering = context.config.channel.ordering
        if ordering != "partition":
            raise ProcessorError(
                f"channel.ordering is {ordering}, but {type(self).__name__} takes a partition's records in offset "
                "order (its micro-batches already run in parallel across the cluster); remove channel.ordering "
                "or set it to partition"
            )
        self._context = context
        if self.spark is None:
            from pyspark import SparkContext
            from pyspark.sql import SparkSession

            # A session this process already runs belongs to whoever started it: join it, keep it.
            self._own_spark = SparkContext._active_spark_context is None and SparkSession.getActiveSession() is None
            self.spark = build_session(context.config.spark)
        if self.value_format == "json" and isinstance(self.schema, str):
            from pyspark.sql.types import StructType

            # A DDL typo should stop the start, not fail every batch. The check without Spark
            # caught most already (parse_schema); what it let through is Spark's to refuse here.
            try:
                self.schema = StructType.fromDDL(self.schema)
            except Exception as exc:  # noqa: BLE001 - any refusal of the parser is the schema's fault
                raise spark_refused(self.schema, exc) from None
        self._ledger = MicroBatchLedger(context.zookeeper, context.paths, context.consumer_id)
        self._ledger.prepare(context.config.channel.topics)
        if self.settle_timeout_s is None:
            self.settle_timeout_s = context.config.channel.shutdown_timeout_s / 2
        if self._driver is not None and self._driver.alive:
            # A start that failed after on_start is not followed by on_stop: end that driver here.
            self._driver.stop(timeout=30)
        # A fresh collector per start: the previous driver stopped the old one for good, and its
        # partitions were all released before on_stop.
        self.collector = Collector(self.bounds)
        self._starts.clear()
        self._gather_failures.clear()
        self._driver = MicroBatchDriver(
            self.collector,
            self._ledger,
            context,
            self.spark,
            self.fn,
            self.value_format,
            self.schema,
            stats=self._stats,
            fence_parameter=self.fence_parameter,
            on_committed=self._publish_report,
        )
        self._driver.start()
        log.info(
            "Spark micro-batches for group %s: max_events %d (up to %d under a backlog), max_bytes %d, "
            "max_interval_ms %d, value_format %s",
            context.group,
            self.bounds.max_events,
            self.bounds.ceiling_events,
            self.bounds.max_bytes,
            self.bounds.max_interval_ms,
            self.value_format,
        )

    def on_stop(self) -> None:
        if self._driver is not None and not self._driver.stop(timeout=30):
            log.error("the Spark driver thread did not stop within 30 s; its batch stays uncommitted")
        context = self._context
        if context is not None:
            # A hot deploy to another processor must not leave this one's figures in status.
            withdraw_report(context.zookeeper, context.paths, context.consumer_id)
        if self._own_spark and self.spark is not None:
            self.spark.stop()
            self.spark = None

    # -- the channel's callbacks ---------------------------------------------------------------

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        context, ledger = self._context, self._ledger
        if context is None or ledger is None:
            raise RuntimeError("SparkMicroBatchProcessor.on_start was not called (run it in an InboundChannel)")
        key = (source.topic, source.partition)
        hold = context.hold(*key)
        if hold is None:
            # Lost meanwhile: the channel's loss handling follows; nothing here is committed.
            return BatchResponse.get_next()
        try:
            if self.collector.registered_hold(key) is not hold:
                response = self._starts.start(source, hold, ledger, self.collector, context)
                if response is not None:
                    return response
            self._add(key, events.messages)
        except PartitionLost:
            raise
        except Exception as exc:  # noqa: BLE001 - ZooKeeper's or a defect: never a skip (see below)
            return self._gathering_failed(source, exc)
        self._gather_failures.pop(key, None)
        return BatchResponse.get_next()

    def _add(self, key: tuple[str, int], messages: list[Any]) -> None:
        collector = self.collector
        first_new = collector.next_offset(key)
        if first_new is None:
            # Forgotten by the driver since the registration check (a slice it had to void): the
            # next batch registers the partition again and re-reads from the committed offset.
            return
        if messages and messages[0].offset() < first_new:
            # A re-delivered batch: its first part was taken already.
            messages = [m for m in messages if m.offset() >= first_new]
        if not messages:
            return
        replay_end = collector.replay_end(key)
        if replay_end is not None:
            cut = 0
            while cut < len(messages) and messages[cut].offset() < replay_end:
                cut += 1
            head = messages[:cut]
            complete = cut < len(messages) or (bool(head) and head[-1].offset() >= replay_end - 1)
            collector.add_replay(
                key, messages_to_arrow(head) if head else None, head[-1].offset() if head else first_new - 1, complete
            )
            messages = messages[cut:]
            if not messages:
                return
        rest: Any = None
        while True:
            if collector.is_full() and self._context is not None:
                # Every partition waits for the driver here: the channel pauses none of them for
                # the buffers they fill meanwhile (ChannelContext.waiting_downstream).
                with self._context.waiting_downstream():
                    collector.wait_for_room()
            else:
                collector.wait_for_room()
            # Converted once there is room, so a waiting worker holds librdkafka's messages only
            # (counted in the channel's budget), not an Arrow copy beside them.
            rest = collector.add_open(key, messages_to_arrow(messages) if rest is None else rest, messages[-1].offset())
            if rest is None:
                return

    def on_idle(self, source: PartitionSource) -> BatchResponse | None:
        # A replay whose last events are gone from the log (retention) would otherwise wait forever.
        if self.collector.replay_end((source.topic, source.partition)) is not None:
            self.collector.complete_replay((source.topic, source.partition))
        return None

    def on_reposition(self, source: PartitionSource, old_offset: int, reason: str) -> None:
        """The partition was moved to ``source.head_offset`` (already committed, or on its way):
        whatever was gathered from the old position is void. The slices still open or ready are
        dropped here, one in Spark's hands is neither committed nor (with a fence) written, and
        the next batch registers the partition again from the new position."""
        key = (source.topic, source.partition)
        self.collector.forget(key)
        context = self._context
        hold = context.hold(*key) if context is not None else None
        if hold is None:
            self._starts.forget(key)
            return
        self._starts.moved(key, hold, source.head_offset, old_offset, reason)
        log.info(
            "%s[%d]: repositioned (%s) from %d to %d: micro-batch work from the old position is dropped",
            source.topic, source.partition, reason, old_offset, source.head_offset,
        )

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        key = (source.topic, source.partition)
        self._starts.forget(key)
        self._gather_failures.pop(key, None)
        timeout = self.settle_timeout_s if self.settle_timeout_s is not None else 15.0
        started = time.monotonic()
        if not self.collector.settle(key, timeout):
            waited = time.monotonic() - started
            log.warning(
                "%s[%d]: released before its micro-batch committed (%s); its next owner replays it",
                source.topic, source.partition,
                "the driver stopped" if self.collector.stopping else f"waited {waited:.1f} s",
            )
        self.collector.forget(key)
        # The driver committed whatever was done; the rest is read again by the next owner.
        return None

    def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
        if isinstance(error, PartitionLost):
            key = (source.topic, source.partition)
            self._starts.forget(key)
            self._gather_failures.pop(key, None)
            context = self._context
            current = context.hold(*key) if context is not None else None
            # The loss may concern an earlier hold while a newer one is already registered.
            if self.collector.registered_hold(key) is not current or current is None:
                self.collector.forget(key)
            return None
        return None

    def _gathering_failed(self, source: PartitionSource, error: Exception) -> BatchResponse:
        """Gathering a batch raised. Nothing of it depends on a record's content (values are
        parsed by the driver, where a failure runs the micro-batch again): the cause is
        ZooKeeper's (reading or abandoning a partition's pending range as its chain starts) or
        a defect. Left to the channel, ``channel.on_error``'s ``skip`` and ``dead-letter`` would
        commit past the batch, which voids the open slice: a hole in exactly-once output. So the
        batch is read again from its first offset after a back-off (``error_backoff_ms``
        doubling to ``error_backoff_max_ms``), whatever the mode; what was gathered of it already
        is not taken twice. Logged as an error, with the traceback at the first attempt and every
        twentieth, and counted in ``stats()["gather_failures"]``."""
        key = (source.topic, source.partition)
        attempt = self._gather_failures.get(key, 0) + 1
        self._gather_failures[key] = attempt
        self._stats.gather_failures += 1
        context = self._context
        channel = context.config.channel if context is not None else None
        wait_ms = backoff_ms(attempt, channel.error_backoff_ms, channel.error_backoff_max_ms) if channel else 1000
        log.error(
            "%s[%d]: gathering offsets from %d failed (attempt %d, %s: %s); reading them again in %d ms",
            source.topic, source.partition, source.head_offset, attempt, type(error).__name__, error, wait_ms,
            exc_info=error if attempt % 20 == 1 else None,
        )
        return BatchResponse.revert().seek(source.head_offset).wait(max(1, wait_ms))

    # -- introspection -------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Batches and events committed, failures, seconds per phase (totals and the last
        micro-batch's, ``last``), output files and bytes, and what is held in memory now."""
        out: dict[str, Any] = asdict(self._stats)
        out["held_events"], out["held_bytes"] = self.collector.sizes()
        return out

    def micro_batch_report(self, consumer: str) -> MicroBatchReport:
        """The figures ``jetkafka status`` and the metrics show for this instance."""
        st = self._stats
        last = st.last
        return MicroBatchReport(
            consumer=consumer,
            batches=st.batches,
            events=st.events,
            failures=st.failures,
            held_events=self.collector.sizes()[0],
            phase_seconds=dict(st.phase_seconds),
            output_files=st.output_files,
            output_bytes=st.output_bytes,
            last_batch_id=None if last is None else last.batch_id,
            last_events=0 if last is None else last.events,
            last_seconds={} if last is None else dict(last.seconds),
            last_output_files=None if last is None else last.output_files,
            last_output_bytes=None if last is None else last.output_bytes,
            last_committed_at=None if last is None else last.committed_at,
            gather_failures=st.gather_failures,
        )

    def _publish_report(self, figures: MicroBatchFigures) -> None:
        """After each commit, on the driver thread: the instance's figures to ZooKeeper, unawaited."""
        context = self._context
        if context is not None:
            publish_report(context.zookeeper, context.paths, self.micro_batch_report(context.consumer_id))

"""Tracing as a channel add-on (one of the standard add-ons of :mod:`jetkafka._assembly`).

At each start of its channel :class:`TracingAddOn` sets up the tracer provider when
``tracing.enabled`` is true (:func:`jetkafka._tracing._setup.configure_tracing`, once per
process; a missing ``tracing`` extra fails the start with
:class:`~jetkafka.errors.MissingExtra`), puts ``trace_id`` and ``span_id`` on log records, and
records the channel's rebalances: a ``partitions taken`` span naming the partitions adopted
(on the rebalance thread), a ``partition released <topic>`` span for each partition given up
(on the worker holding its turn). Both are short: they mark when the partitions moved, with the
group and the instance, so a trace backend lines a batch's spans up with the moves around them.
At the channel's stop it flushes the spans still queued, so the last batches of a process that
exits next are exported; the stop waits for the collector 5 s at most, whatever it does
(:class:`~jetkafka._tracing._delivery.SpanDelivery`), after the partitions were released.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetkafka._tracing._logs import install_trace_ids
from jetkafka._tracing._setup import configure_tracing, flush
from jetkafka._tracing._spans import operation_span, partition_attributes
from jetkafka.channel._add_ons import ChannelAddOn

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel
    from jetkafka.coordination._ownership import Lease
    from jetkafka.events import Key
    from jetkafka.processors._base import BatchEventProcessor


class TracingAddOn(ChannelAddOn):
    """Tracing of one channel; ``start``/``stop`` on the thread that starts or stops it, the
    hooks on the threads :mod:`jetkafka.channel._add_ons` names."""

    def __init__(self) -> None:
        self._channel: RunningChannel | None = None
        self._traced = False

    def start(self, channel: RunningChannel, processor: BatchEventProcessor) -> None:
        self._traced = configure_tracing(channel.config.tracing)
        if self._traced:
            install_trace_ids()
        self._channel = channel

    def stop(self) -> None:
        self._channel = None
        if self._traced:
            flush()

    def partitions_taken(self, keys: list[Key]) -> None:
        channel = self._channel
        if channel is None:
            return
        with operation_span(
            "partitions taken",
            {
                "messaging.system": "kafka",
                "messaging.consumer.group.name": channel.config.channel.group,
                "jetkafka.instance": channel.consumer_id,
                "jetkafka.partitions": [f"{topic}[{p}]" for topic, p in keys],
            },
        ):
            pass

    def partition_removed(self, lease: Lease) -> None:
        channel = self._channel
        if channel is None:
            return
        attributes = partition_attributes(lease.topic, lease.partition, channel.config.channel.group)
        attributes["jetkafka.instance"] = channel.consumer_id
        if lease.committed is not None:
            attributes["jetkafka.committed_offset"] = lease.committed
        with operation_span(f"partition released {lease.topic}", attributes):
            pass


__all__ = ["TracingAddOn"]

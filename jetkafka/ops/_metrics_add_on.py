"""The Prometheus metrics as a channel add-on (one of the standard add-ons of :mod:`jetkafka._assembly`).

At each start of its channel (again after a hot deploy's resubscribe) :class:`MetricsAddOn`
attaches the channel to the endpoint of its ``metrics.host``/``metrics.port`` when the port is
set, and detaches it at the channel's teardown. prometheus-client is imported only then, so a
channel that never serves metrics never imports it.

Failure modes: a port that is taken makes the channel's start fail with a
:class:`~jetkafka.errors.ConfigError` naming ``metrics.port``
(:func:`~jetkafka.ops._metrics_endpoint.attach_channel`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetkafka.channel._add_ons import ChannelAddOn

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel
    from jetkafka.ops._metrics_endpoint import MetricsHandle
    from jetkafka.processors._base import BatchEventProcessor


class MetricsAddOn(ChannelAddOn):
    """Serves the channel's metrics while it runs; ``start``/``stop`` run on the thread that
    starts or stops the channel, the scrape and watermark threads are the endpoint's."""

    def __init__(self) -> None:
        self.handle: MetricsHandle | None = None

    def start(self, channel: RunningChannel, processor: BatchEventProcessor) -> None:
        if channel.config.metrics.port is None:
            return
        from jetkafka.ops._metrics_endpoint import attach_channel

        self.handle = attach_channel(channel)

    def stop(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            handle.detach()


__all__ = ["MetricsAddOn"]

"""In-process channels that each have a ZooKeeper session of their own.

Channels of one process normally share one :class:`ProcessSession` (one ZooKeeper session). To
test what a group of instances does when ZooKeeper misbehaves, each :class:`Instance` gets its
own, so two instances in the test process are two sessions, as two processes would be.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState

from jetkafka import (
    BatchEventProcessor,
    EventBatch,
    InboundChannel,
    PartitionLost,
    PartitionSource,
    ProcessSession,
    parse_config,
)
from jetkafka.processors._base import BatchResponse
from tests.support.channels import RecordingProcessor


class TimedRecorder(RecordingProcessor):
    """A RecordingProcessor that also keeps the start time (monotonic) of every batch."""

    def __init__(self, response: Callable[[PartitionSource, EventBatch], BatchResponse] | None = None) -> None:
        super().__init__(response)
        self.batch_starts: list[tuple[float, tuple[str, int], int]] = []

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        with self.lock:
            self.batch_starts.append((time.monotonic(), (source.topic, source.partition), events[0].offset))
        return super().on_next_batch(source, events)

    def losses(self) -> list[tuple[str, tuple[str, int], Any]]:
        return [c for c in self.calls_named("exception") if isinstance(c[2], PartitionLost)]


class SessionChannel:
    """A started channel with its own ProcessSession (ZooKeeper session) and the given processor."""

    def __init__(self, config: dict[str, Any], processor: BatchEventProcessor) -> None:
        parsed = parse_config(config)
        self.session = ProcessSession(parsed.zookeeper)
        self.session.start()
        try:
            self.channel = InboundChannel(parsed, processor, controller=self.session)
            self.channel.start()
        except BaseException:
            self.session.stop()
            raise

    @property
    def client(self) -> KazooClient:
        return self.session.client

    @property
    def consumer_id(self) -> str:
        return self.channel.consumer_id

    def close(self, timeout: float = 30.0) -> bool:
        try:
            return self.channel.shutdown(timeout)
        finally:
            self.session.stop()


class Instance(SessionChannel):
    """A :class:`SessionChannel` recording with a :class:`TimedRecorder`."""

    def __init__(
        self, config: dict[str, Any], response: Callable[[PartitionSource, EventBatch], BatchResponse] | None = None
    ) -> None:
        self.processor = TimedRecorder(response)
        super().__init__(config, self.processor)

    @property
    def session_id(self) -> int:
        return int(self.client.client_id[0])

    def connected(self) -> bool:
        return self.client.state == KazooState.CONNECTED

    def server_port(self) -> int | None:
        """The client port of the ZooKeeper server this session is connected through now."""
        sock = getattr(self.client._connection, "_socket", None)  # kazoo keeps no public accessor
        try:
            return int(sock.getpeername()[1]) if sock is not None else None
        except OSError:
            return None

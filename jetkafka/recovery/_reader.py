"""Reading recovery ranges from Kafka with a consumer of its own.

The channel's fetching consumer belongs to the fetcher thread (librdkafka's Python binding hangs
when one consumer is called from a second thread while ``consume`` runs), so recovery reads
through a second librdkafka consumer, manually assigned, that only the recovery thread calls.

Each partition being recovered has a *feed*: the consumer is assigned to it at the next offset
to recover, and its records are buffered up to the end of the range being read (records at or
past the end are never buffered, so a range's last record is delivered exactly once and nothing
beyond it). A full buffer pauses the partition in librdkafka.

Guarantees: a feed hands out records of one partition in strictly rising offsets, starting at
the offset it was opened at and below its end. ``at_end`` becomes true once a record at or past
the end was seen, i.e. every record of the range has been fetched. Failure modes: an offset the
broker no longer holds (retention) sets ``out_of_range``; the caller decides (trims the range).
Other Kafka errors are logged; librdkafka keeps retrying.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from jetkafka._client_logs import librdkafka_logger
from jetkafka.channel._fetcher import consumer_config
from jetkafka.errors import ConnectError
from jetkafka.events import Key

log = logging.getLogger(__name__)


@dataclass
class Feed:
    next: int  # offset of the next record to hand out
    end: int  # first offset not to buffer
    messages: deque[Any] = field(default_factory=deque)
    paused: bool = False
    at_end: bool = False
    out_of_range: bool = False
    last_data: float = field(default_factory=time.monotonic)

    @property
    def fetched_next(self) -> int:
        """The offset the broker should send next for this feed."""
        return self.messages[-1].offset() + 1 if self.messages else self.next


class RangeReader:
    """One recovery consumer; every method must be called from the same thread."""

    def __init__(self, kafka: Mapping[str, Any], group: str, batch_max_events: int) -> None:
        conf = consumer_config(kafka, group)
        # Recovery reads at a limited rate and re-positions when a range ends: pre-fetching a
        # few batches per partition is enough, and keeps a re-position from discarding much.
        conf["queued.min.messages"] = max(2000, 4 * batch_max_events)
        # librdkafka waits this long before fetching again once its queue was full (default
        # 1 s): far too long when the queue is drained by a few batches at a time.
        conf["fetch.queue.backoff.ms"] = 20
        self._consumer = Consumer(conf, logger=librdkafka_logger())
        self._bootstrap = str(conf.get("bootstrap.servers", "?"))
        self._buffer_max = 8 * batch_max_events
        self._resume_below = 4 * batch_max_events  # half full: the refetch has time to arrive
        self._feeds: dict[Key, Feed] = {}

    def close(self) -> None:
        self._consumer.close()

    # -- feeds ----------------------------------------------------------------------------------

    def feed(self, key: Key) -> Feed | None:
        return self._feeds.get(key)

    def open(self, key: Key, offset: int, end: int) -> None:
        """Read ``key`` from ``offset``, buffering records below ``end``; drops what was buffered."""
        tp = TopicPartition(key[0], key[1], offset)
        if key in self._feeds:
            # Re-assigning discards whatever librdkafka pre-fetched from the old position.
            self._consumer.incremental_unassign([TopicPartition(key[0], key[1])])
        self._consumer.incremental_assign([tp])
        # librdkafka keeps a partition's pause across re-assignment: a feed starts unpaused.
        self._consumer.resume([TopicPartition(key[0], key[1])])
        self._feeds[key] = Feed(offset, end)
        log.debug("%s[%d]: recovery reads from offset %d up to %d", key[0], key[1], offset, end)

    def close_feed(self, key: Key) -> None:
        if self._feeds.pop(key, None) is not None:
            self._consumer.incremental_unassign([TopicPartition(key[0], key[1])])

    def keys(self) -> list[Key]:
        return list(self._feeds)

    def take(self, key: Key, limit: int) -> list[Any]:
        """Up to ``limit`` buffered records of ``key``, in offset order."""
        feed = self._feeds[key]
        out = [feed.messages.popleft() for _ in range(min(limit, len(feed.messages)))]
        if out:
            feed.next = out[-1].offset() + 1
        if feed.paused and not feed.at_end and len(feed.messages) < self._resume_below:
            self._consumer.resume([TopicPartition(key[0], key[1])])
            feed.paused = False
        return out

    def ready(self, key: Key, batch: int, linger: float) -> bool:
        """A full batch is buffered, or the range's end was reached, or records waited ``linger`` s."""
        feed = self._feeds.get(key)
        if feed is None:
            return False
        if feed.out_of_range or feed.at_end or len(feed.messages) >= batch:
            return True
        return bool(feed.messages) and time.monotonic() - feed.last_data >= linger

    # -- fetching -------------------------------------------------------------------------------

    def poll(self, timeout: float) -> int:
        """Fetch for every open feed for at most ``timeout`` seconds; returns records buffered."""
        if not self._feeds:
            time.sleep(timeout)
            return 0
        try:
            msgs = self._consumer.consume(num_messages=self._buffer_max, timeout=timeout)
        except KafkaException as exc:
            log.error("recovery fetch failed: %s", exc)
            time.sleep(timeout)
            return 0
        buffered = 0
        for m in msgs:
            if m.error() is not None:
                self._on_error(m)
                continue
            buffered += self._route(m)
        return buffered

    def _route(self, m: Any) -> int:
        key = (m.topic(), m.partition())
        feed = self._feeds.get(key)
        offset = m.offset()
        if feed is None or offset < feed.fetched_next:
            return 0  # closed since, or fetched again after a pause: already buffered
        feed.last_data = time.monotonic()
        if offset >= feed.end:
            feed.at_end = True
            self._pause(key, feed)
            return 0
        feed.messages.append(m)
        if len(feed.messages) >= self._buffer_max:
            self._pause(key, feed)
        return 1

    def _pause(self, key: Key, feed: Feed) -> None:
        if not feed.paused:
            self._consumer.pause([TopicPartition(key[0], key[1])])
            feed.paused = True

    def _on_error(self, m: Any) -> None:
        err: KafkaError = m.error()
        key = (m.topic(), m.partition()) if m.topic() is not None else None
        feed = self._feeds.get(key) if key is not None else None
        if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET) and feed is not None:
            assert key is not None
            feed.out_of_range = True
            self._pause(key, feed)
            log.error("%s[%d]: recovery offset %d is out of range on the broker", key[0], key[1], feed.fetched_next)
        elif err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            log.warning("recovery: Kafka unreachable (%s); librdkafka keeps retrying", err.str())
        else:
            log.warning("recovery: Kafka error%s: %s", f" on {key[0]}[{key[1]}]" if key else "", err.str())

    def watermarks(self, key: Key, timeout: float = 10.0) -> tuple[int, int]:
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(key[0], key[1]), timeout=timeout)
        except KafkaException as exc:
            raise ConnectError(f"{key[0]}[{key[1]}]: cannot read watermarks from {self._bootstrap}: {exc}") from None
        return int(low), int(high)

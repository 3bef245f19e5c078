"""What the channel reads of the broker's metadata: partition counts, watermarks, log ends.

Through a consumer of its own that never fetches, so any thread may ask (under one lock: the
client's calls are not safe from two threads at once), and a look-up never waits behind the
fetcher's ``consume``. Each look-up waits at most its timeout for the broker, then raises
:class:`~jetkafka.errors.ConnectError` naming the address and the setting to raise, except
:meth:`BrokerMetadata.log_ends` and :meth:`BrokerMetadata.high_watermarks`, which leave out
what the broker did not answer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from jetkafka.errors import ConnectError, TopicNotFound
from jetkafka.events import Key


class BrokerMetadata:
    def __init__(self, consumer: Any, bootstrap: str, connection_timeout_s: float) -> None:
        self._consumer = consumer
        self._bootstrap = bootstrap
        # How long a look-up waits for a broker by default (channel.kafka_connection_timeout_s).
        self._connection_timeout_s = connection_timeout_s
        self._lock = threading.Lock()
        # Each partition's leader (broker id), of the topics of the latest partition_counts()
        # look-up (the start, every rebalance, the metrics); a leader that moved since is
        # caught up by the next one.
        self.leaders: dict[Key, int] = {}

    def partition_counts(
        self, topics: tuple[str, ...], timeout: float | None = None, missing_ok: bool = False
    ) -> dict[str, int]:
        """Partitions per topic; a missing topic raises :class:`TopicNotFound` unless ``missing_ok``.

        Waits up to ``timeout`` (default: the connection timeout) for a broker, then raises
        :class:`ConnectError` naming the address, the timeout and its setting. The wait for
        another thread's look-up (the metrics' watermark thread) counts against ``timeout``.
        """
        timeout = self._connection_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        if not self._lock.acquire(timeout=timeout):
            raise self._unreachable(timeout, "another look-up was waiting for the broker all that time")
        try:
            meta = self._consumer.list_topics(timeout=max(0.0, deadline - time.monotonic()))
        except KafkaException as exc:
            raise self._unreachable(timeout, exc.args[0].str()) from None
        finally:
            self._lock.release()
        self.leaders = self.leaders | {
            (topic, partition): pmeta.leader
            for topic in topics
            if (tmeta := meta.topics.get(topic)) is not None and tmeta.error is None
            for partition, pmeta in tmeta.partitions.items()
        }
        counts = {}
        for topic in topics:
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None or not tmeta.partitions:
                if missing_ok:
                    continue
                raise TopicNotFound(
                    f"topic {topic!r} does not exist on {self._bootstrap}; create it, or fix channel.topics"
                )
            counts[topic] = len(tmeta.partitions)
        return counts

    def _unreachable(self, timeout: float, cause: str) -> ConnectError:
        return ConnectError(
            f"cannot reach Kafka at {self._bootstrap} within {timeout:g} s ({cause}); "
            "check kafka.bootstrap.servers and that the broker runs (for a local one: jetkafka dev up), "
            "or raise channel.kafka_connection_timeout_s"
        )

    def watermarks(self, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
        try:
            with self._lock:
                low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        except KafkaException as exc:
            raise ConnectError(f"{topic}[{partition}]: cannot read watermarks from {self._bootstrap}: {exc}") from None
        return int(low), int(high)

    def log_ends(self, topic: str, partitions: list[int], earliest: bool, timeout: float = 10.0) -> dict[int, int]:
        """The low (``earliest``) or high watermark of each partition, in one request.

        ListOffsets with the special timestamps -2 / -1; a partition the broker answers with
        an error is asked again on its own (:meth:`watermarks`).
        """
        wanted = [TopicPartition(topic, p, -2 if earliest else -1) for p in partitions]
        try:
            with self._lock:
                found = self._consumer.offsets_for_times(wanted, timeout=timeout)
        except KafkaException:
            found = []
        out = {tp.partition: int(tp.offset) for tp in found if tp.error is None and tp.offset >= 0}
        for p in partitions:
            if p not in out:
                low, high = self.watermarks(topic, p, timeout)
                out[p] = low if earliest else high
        return out

    def high_watermarks(self, keys: list[Key], timeout: float) -> dict[Key, int]:
        """The high watermark of each partition, of any topics, in one ListOffsets request;
        a partition the broker answers with an error is left out."""
        wanted = [TopicPartition(topic, partition, -1) for topic, partition in keys]
        with self._lock:
            found = self._consumer.offsets_for_times(wanted, timeout=timeout)
        return {(tp.topic, tp.partition): int(tp.offset) for tp in found if tp.error is None and tp.offset >= 0}

    def close(self) -> None:
        with self._lock:
            self._consumer.close()

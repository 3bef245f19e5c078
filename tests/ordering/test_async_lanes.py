"""An asynchronous processor under ``ordering: key``: many coroutines of one partition in
flight at once, a graceful shutdown among them, and a new start that repeats nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

from kazoo.client import KazooClient

from jetkafka import BatchResponse, EventBatch, InboundChannel, PartitionSource
from jetkafka.ordering import CommitPoint
from jetkafka.processors._async import AsyncBatchEventProcessor
from tests.ordering.support import KEYS, commit_point, key_of, keyed
from tests.support.channels import channel_config, wait_until

SLOW_S = 1.5


class AsyncRecorder(AsyncBatchEventProcessor):
    """Logs deliveries at the start of each coroutine; each batch awaits 20 ms (record 0's
    batch SLOW_S); checks no key is in two coroutines at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[int] = []
        self.busy: set[bytes | None] = set()
        self.violations: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        keys = {e.key for e in events}
        batch_ids = [int(e.value or b"-1") for e in events]
        with self.lock:
            if keys & self.busy:
                self.violations.append(f"keys {sorted(keys & self.busy)} in two coroutines at once")
            self.busy |= keys
            self.ids.extend(batch_ids)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(SLOW_S if 0 in batch_ids else 0.02)
            return BatchResponse.advance()
        finally:
            with self.lock:
                self.busy -= keys
                self.in_flight -= 1

    def delivered(self) -> list[int]:
        with self.lock:
            return list(self.ids)


def test_a_graceful_shutdown_with_coroutines_in_flight_repeats_nothing(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    ids = range(40 * KEYS)
    produce(topic, keyed(ids, 1))
    config = channel_config(
        zk_connect,
        kafka_config,
        [topic],
        ordering="key",
        threads=2,
        batch_max_events=2,
        max_in_flight_per_partition=100,
    )
    first = AsyncRecorder()
    channel = InboundChannel.from_dict(config, processor=first)
    channel.start()
    try:
        # Shut down while the slow key's coroutine and others are awaiting.
        wait_until(lambda: len(first.delivered()) >= 60, what="coroutines under way")
    finally:
        assert channel.shutdown(30)
    point = commit_point(zk, topic, 0)
    done = Counter(first.delivered())
    assert set(done.values()) == {1}
    assert isinstance(point, CommitPoint) and int(point) == min(set(ids) - set(done)) > 0
    assert point.finished_offsets() == {o for o in done if o > point}
    assert first.most_in_flight > 2, "coroutines of the partition never overlapped"

    second = AsyncRecorder()
    channel = InboundChannel.from_dict(config, processor=second)
    channel.start()
    try:
        wait_until(lambda: commit_point(zk, topic, 0) == len(ids), what="the second owner at the end")
        time.sleep(0.3)
    finally:
        assert channel.shutdown(30)
    assert Counter(second.delivered()) == Counter(set(ids) - set(done)), "a finished record ran again"
    assert first.violations == [] and second.violations == []
    print(
        f"async: {len(done)} records before the shutdown (up to {first.most_in_flight} coroutines at once), "
        f"{point.finished_count} finished above commit point {int(point)}, {len(second.delivered())} after; "
        f"slow key k{key_of(0)}"
    )


class HeldAsyncRecorder(AsyncRecorder):
    """Record 0's coroutine awaits ``release`` (longer than ``shutdown_timeout_s``)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if any(e.value == b"0" for e in events) and not self.release.is_set():
            keys = {e.key for e in events}
            with self.lock:
                self.busy |= keys
                self.ids.extend(int(e.value or b"-1") for e in events)
            try:
                while not self.release.is_set():
                    await asyncio.sleep(0.02)
                return BatchResponse.advance()
            finally:
                with self.lock:
                    self.busy -= keys
        return await super().on_next_batch(source, events)


def test_a_shutdown_gives_up_a_partition_with_a_coroutine_outlasting_it_and_a_new_start_takes_it_after(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce
) -> None:
    """The coroutine's end comes after its start's work queue closed: the partition must stop
    counting as busy then, or no later start of the channel ever takes it again."""
    topic = topic_factory(partitions=1)
    ids = range(20 * KEYS)
    produce(topic, keyed(ids, 1))
    config = channel_config(
        zk_connect, kafka_config, [topic], ordering="key", threads=1, batch_max_events=2,
        max_in_flight_per_partition=40, shutdown_timeout_s=1,
    )
    proc = HeldAsyncRecorder()
    channel = InboundChannel.from_dict(config, processor=proc)
    channel.start()
    try:
        wait_until(lambda: 0 in proc.delivered() and len(proc.delivered()) >= 20, what="the held coroutine among others")
        assert not channel.shutdown(), "the shutdown should give the partition up"
        assert channel.owned_partitions() == []
        before = len(proc.delivered())
        channel.start()
        time.sleep(1.5)
        assert len(proc.delivered()) == before, "taken again while the given-up coroutine was awaiting"
        proc.release.set()
        wait_until(lambda: commit_point(zk, topic, 0) == len(ids), what="the partition taken again and done")
    finally:
        proc.release.set()
        channel.shutdown(30)
    assert proc.violations == []
    assert set(proc.delivered()) == set(ids)

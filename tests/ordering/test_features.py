"""The channel's features under ``ordering: key | none``: pause and resume with batches in flight,
the failure policy per key, the responses a batch may give, an asynchronous processor under
partition order, and the configuration's refusals."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from jetkafka import (
    AsyncBatchEventProcessor,
    BatchEventProcessor,
    BatchResponse,
    ConfigError,
    EventBatch,
    InboundChannel,
    PartitionSource,
    parse_config,
)
from jetkafka.ordering import OwnCommitRefused, ResponseRefused
from tests.support.channels import channel_config, committed_offsets, wait_until

Produce = Callable[[str, list[tuple[int, bytes, bytes]]], list[int]]


def keyed(count: int, keys: int) -> list[tuple[int, bytes, bytes]]:
    """``count`` records on partition 0: record ``i`` has key ``k<i % keys>`` and value ``i``."""
    return [(0, f"k{i % keys}".encode(), str(i).encode()) for i in range(count)]


class Deliveries(BatchEventProcessor):
    """Counts deliveries per offset; ``respond(events, attempt)`` decides (default: advance)."""

    def __init__(self, respond: Callable[[EventBatch, int], BatchResponse] | None = None) -> None:
        self.lock = threading.Lock()
        self.delivered: dict[int, int] = {}
        self.times: dict[int, list[float]] = {}
        self.errors: list[BaseException] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = 0
        self._respond = respond or (lambda events, attempt: BatchResponse.advance())

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        with self.lock:
            self.started += 1
            attempt = 1 + max(self.delivered.get(e.offset, 0) for e in events)
            for e in events:
                self.delivered[e.offset] = self.delivered.get(e.offset, 0) + 1
                self.times.setdefault(e.offset, []).append(time.monotonic())
        assert self.gate.wait(60), "the test never opened the gate"
        return self._respond(events, attempt)

    def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
        with self.lock:
            self.errors.append(error)
        return None


def start(zk_connect: str, kafka_config: dict[str, Any], topic: str, processor: BatchEventProcessor, **channel: Any) -> InboundChannel:
    data = channel_config(zk_connect, kafka_config, [topic], threads=4, batch_max_events=5, **channel)
    ch = InboundChannel.from_dict(data, processor=processor)
    ch.start()
    return ch


@pytest.mark.parametrize("ordering", ["key", "none"])
def test_a_pause_lets_batches_in_flight_finish_starts_none_and_resume_goes_on(
    zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Produce,
    ordering: str,
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, keyed(200, 8))
    processor = Deliveries()
    processor.gate.clear()  # the first batches stay in hand
    ch = start(zk_connect, kafka_config, topic, processor, ordering=ordering)
    try:
        wait_until(lambda: processor.started >= 4, what="batches in flight")
        ch.pause(topic, 0)
        time.sleep(0.3)
        in_hand = processor.started
        processor.gate.set()  # the batches in hand finish and are committed; no new one starts
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0, 0) > 0, what="what finished committed")
        time.sleep(1.0)
        assert processor.started == in_hand, "a batch started while the partition was paused"
        ch.resume(topic, 0)
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 200}, what="everything after the resume")
        assert sorted(processor.delivered) == list(range(200))
        assert set(processor.delivered.values()) == {1}  # a pause repeats nothing
    finally:
        processor.gate.set()
        ch.shutdown()


def test_a_poison_record_under_retry_holds_back_only_its_key(
    zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, keyed(120, 6))
    poison = 7  # key k1

    def respond(events: EventBatch, attempt: int) -> BatchResponse:
        if any(e.offset == poison for e in events):
            raise ValueError(f"cannot handle offset {poison}")
        return BatchResponse.advance()

    processor = Deliveries(respond)
    ch = start(zk_connect, kafka_config, topic, processor, ordering="key", error_backoff_ms=50, error_backoff_max_ms=200)
    try:
        others = [o for o in range(120) if o % 6 != 1]
        wait_until(lambda: all(o in processor.delivered for o in others), what="every other key's records")
        # The commit point stays at the first record of the poison's batch (k1's first five
        # records, retried whole): nothing of k1 after that batch was delivered.
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 1}, what="the commit point at the poison's batch")
        assert not [o for o in processor.delivered if o % 6 == 1 and o > 25]
        wait_until(lambda: processor.delivered[poison] >= 3, what="the poison's batch retried")
        (snapshot,) = ch.partitions()
        assert snapshot.failure is not None and snapshot.failure.state == "retrying"
        assert "cannot handle offset 7" in snapshot.failure.error
        assert snapshot.lanes is not None and snapshot.lanes.finished_above == len(others) - 1  # all but offset 0
    finally:
        ch.shutdown()
    # The graceful release kept the finished map: a next owner would process only key k1's records.
    assert all(n == 1 for o, n in processor.delivered.items() if o % 6 != 1)


def test_on_error_skip_gives_up_the_poison_record_alone(
    zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, keyed(60, 4))

    def respond(events: EventBatch, attempt: int) -> BatchResponse:
        if any(e.offset == 10 for e in events):
            raise ValueError("poison")
        return BatchResponse.advance()

    processor = Deliveries(respond)
    ch = start(
        zk_connect, kafka_config, topic, processor, ordering="key", error_backoff_ms=10, error_backoff_max_ms=50,
        on_error={"mode": "skip", "max_attempts": 2},
    )
    try:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 60}, what="everything, the poison skipped")
    finally:
        ch.shutdown()
    assert sorted(processor.delivered) == list(range(60))
    # Its batch isolated record by record: the good records of that batch delivered again at most
    # while isolating, every other record once.
    assert processor.delivered[10] >= 2
    batch_of_poison = {o for o, n in processor.delivered.items() if n > 1}
    assert all(o % 4 == 10 % 4 for o in batch_of_poison), batch_of_poison


def test_responses_under_key_seek_inside_the_batch_waits_and_an_offset_outside_is_refused(
    zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, keyed(40, 2))

    def respond(events: EventBatch, attempt: int) -> BatchResponse:
        offsets = [e.offset for e in events]
        if 4 in offsets and attempt == 1:
            # Records before 4 done; come back to 4 in 500 ms (a Retry-After).
            return BatchResponse.advance().seek(4).wait(500, "subscriber busy")
        if 9 in offsets and attempt == 1:
            return BatchResponse.advance().seek(1_000)  # no partition position to move: refused
        return BatchResponse.advance()

    processor = Deliveries(respond)
    ch = start(zk_connect, kafka_config, topic, processor, ordering="key", error_backoff_ms=10)
    try:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 40}, what="everything")
    finally:
        ch.shutdown()
    assert sorted(processor.delivered) == list(range(40))
    first, again = processor.times[4][:2]
    assert again - first >= 0.45  # the wait was kept, for that key's batch
    assert processor.delivered[4] == 2
    # Records of the same batch before offset 4 were finished and not delivered again.
    assert processor.delivered[0] == 1 and processor.delivered[2] == 1
    refused = [e for e in processor.errors if isinstance(e, ResponseRefused)]
    assert refused and "seek(1000)" in str(refused[0]) and "set channel.ordering: partition" in str(refused[0])
    assert processor.delivered[9] == 2  # the refused batch was retried as a failure


class OwnCommitter(Deliveries):
    """Tries to commit the middle of its first batch itself through ``ChannelContext.commit``."""

    def __init__(self) -> None:
        super().__init__()
        self.context: Any = None
        self.outcome: BaseException | str | None = None

    def on_start(self, context: Any) -> None:
        self.context = context

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if self.outcome is None:
            try:
                self.context.commit({(source.topic, source.partition): events[len(events) // 2].offset})
                self.outcome = "committed"
            except Exception as exc:  # noqa: BLE001 - what the processor is told is the test's subject
                self.outcome = exc
        return super().on_next_batch(source, events)


def test_a_processors_own_commit_is_refused_under_key_and_nothing_is_written(
    zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, keyed(60, 4))
    processor = OwnCommitter()
    ch = start(zk_connect, kafka_config, topic, processor, ordering="key")
    try:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 60}, what="everything")
    finally:
        ch.shutdown()
    assert isinstance(processor.outcome, OwnCommitRefused), processor.outcome
    assert "set channel.ordering: partition" in str(processor.outcome) and "advance()" in str(processor.outcome)
    assert sorted(processor.delivered) == list(range(60)) and set(processor.delivered.values()) == {1}


class AsyncDeliveries(AsyncBatchEventProcessor):
    def __init__(self) -> None:
        self.delivered: list[int] = []
        self.concurrent = 0
        self.most = 0

    async def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        self.concurrent += 1
        self.most = max(self.most, self.concurrent)
        await asyncio.sleep(0.001)
        self.delivered.extend(e.offset for e in events)
        self.concurrent -= 1
        return BatchResponse.advance()


def test_an_async_processor_under_partition_order_runs_one_batch_at_a_time_in_order(
    zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, keyed(100, 5))
    processor = AsyncDeliveries()
    ch = start(zk_connect, kafka_config, topic, processor)
    try:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="everything")
    finally:
        ch.shutdown()
    assert processor.delivered == list(range(100))
    assert processor.most == 1


def _config(**channel: Any) -> dict[str, Any]:
    return {
        "zookeeper": {"connect": "localhost:2181"},
        "kafka": {"bootstrap.servers": "localhost:9092"},
        "channel": {"group": "g", "topics": ["t"], **channel},
    }


def test_the_spark_processor_refuses_key_and_none_with_the_fix() -> None:
    data = _config(ordering="key")
    data["processor"] = {"class": "jetkafka.spark:SparkMicroBatchProcessor", "options": {}}
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    text = str(caught.value)
    assert "channel.ordering" in text and "Spark processor" in text and "set it to partition" in text


@pytest.mark.parametrize(
    ("channel", "words"),
    [
        ({"ordering": "keyed"}, ["channel.ordering", "partition", "key", "none"]),
        ({"max_in_flight_per_partition": 0}, ["channel.max_in_flight_per_partition", "1"]),
        ({"max_in_flight_per_partition": 100_000}, ["channel.max_in_flight_per_partition", "50000"]),
    ],
)
def test_bad_ordering_values_name_the_key_and_what_is_allowed(channel: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_config(**channel))
    text = str(caught.value).replace(",", "").replace("_", "_")
    for word in words:
        assert word in text, (word, text)


def test_out_of_range_under_key_goes_on_at_the_log_start_and_drops_the_map(
    zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Produce
) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = topic_factory(partitions=1)
    produce(topic, keyed(100, 4))
    # A key-mode owner committed 10 with 15..17 finished; then retention deleted everything below 50.
    zk.ensure_path(f"/consumers/g/offsets/{topic}")
    zk.create(f"/consumers/g/offsets/{topic}/0", b"10\n5+3")
    admin = AdminClient(dict(kafka_config))  # kept: the futures need their client alive
    for future in admin.delete_records([TopicPartition(topic, 0, 50)]).values():
        future.result(timeout=10)
    processor = Deliveries()
    ch = start(zk_connect, kafka_config, topic, processor, ordering="key", on_out_of_range="earliest")
    try:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="everything from the log start")
        lost = ch.stats.loss_counts()
    finally:
        ch.shutdown()
    assert sorted(processor.delivered) == list(range(50, 100))
    assert set(processor.delivered.values()) == {1}
    assert lost["retention"] == 40  # offsets 10..49, deleted unread
    data, _ = zk.get(f"/consumers/g/offsets/{topic}/0")
    assert data == b"100"  # the map went with the move

"""The fetcher: partitions taken together are fetched together, the latest position wins, and
each run of a partition's messages reaches that partition's buffer in order."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._fetcher import Fetcher, consumer_config
from jetkafka.channel._partition import PartitionState
from jetkafka.coordination._ownership import PartitionOwnership
from tests.support.channels import values
from tests.support.coordination import PATHS, two_clients


class RecordingConsumer:
    """The fetcher's real consumer, noting each ``incremental_assign`` call."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.assign_calls: list[list[tuple[int, int]]] = []

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assign_calls.append([(tp.partition, tp.offset) for tp in partitions])
        self._consumer.incremental_assign(partitions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


class ScriptedConsumer(RecordingConsumer):
    """Once assigned, ``consume`` returns the given lists of messages, one per call."""

    def __init__(self, consumer: Any, script: list[list[Message]]) -> None:
        super().__init__(consumer)
        self._script = script

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        if self.assign_calls and self._script:
            return self._script.pop(0)
        return self._consumer.consume(num_messages=num_messages, timeout=timeout)


@contextmanager
def held_partitions(
    zk_connect: str, kafka_config: dict[str, Any], topic: str, starts: dict[int, int]
) -> Iterator[tuple[Fetcher, RecordingConsumer, dict[int, PartitionState]]]:
    """A fetcher (not started) and one state per partition of ``starts``, each at its start offset."""
    budget = BufferBudget(100, 1 << 20)
    states: dict[tuple[str, int], PartitionState] = {}
    fetcher = Fetcher(kafka_config, "g", states.get, lambda state: None, budget)
    recording = RecordingConsumer(fetcher.consumer)
    fetcher.consumer = recording  # type: ignore[assignment]
    try:
        with two_clients(zk_connect) as (client, _):
            own = PartitionOwnership(client, PATHS, "a")
            own.prepare(topic)
            for lease in own.take_many(topic, sorted(starts)):
                state = PartitionState(lease, starts[lease.partition], 100, 1 << 20, budget)
                state.buffer.await_seek()  # as the channel does until the fetcher applies the assignment
                states[lease.key] = state
            yield fetcher, recording, {p: states[(topic, p)] for p in starts}
    finally:
        fetcher.stop()


def buffered_offsets(state: PartitionState) -> list[int]:
    return [m.offset() for m in state.buffer.messages()]


def wait_buffered(states: dict[int, PartitionState], want: dict[int, list[int]], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while {p: buffered_offsets(s) for p, s in states.items()} != want:
        assert time.monotonic() < deadline, {p: buffered_offsets(s) for p, s in states.items()}
        time.sleep(0.05)


def test_partitions_taken_together_are_assigned_in_one_call_each_at_its_offset(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=4)
    produce(topic, values(20, 4))  # offsets 0..4 in every partition
    starts = {0: 0, 1: 2, 2: 4, 3: 5}
    with held_partitions(zk_connect, kafka_config, topic, starts) as (fetcher, recording, states):
        fetcher.assign((states[p], offset) for p, offset in starts.items())
        fetcher.start()
        wait_buffered(states, {p: list(range(start, 5)) for p, start in starts.items()})
        # One librdkafka assignment for all four: its first fetch asks for every partition.
        assert recording.assign_calls == [[(0, 0), (1, 2), (2, 4), (3, 5)]]
        assert all(not s.buffer.seek_pending for s in states.values())


def test_a_seek_queued_after_the_assignment_of_its_partition_wins(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(10, 2))  # offsets 0..4 in both partitions
    with held_partitions(zk_connect, kafka_config, topic, {0: 0, 1: 1}) as (fetcher, recording, states):
        fetcher.assign([(states[0], 0), (states[1], 1)])
        states[0].reposition(3)  # what a reset or a seek back does before asking the fetcher
        fetcher.seek(states[0], 3)
        fetcher.start()  # both commands are taken in one go: the later position counts
        wait_buffered(states, {0: [3, 4], 1: [1, 2, 3, 4]})
        assert recording.assign_calls == [[(0, 3), (1, 1)]]


def test_commands_of_an_earlier_lease_of_a_partition_are_not_applied_to_the_new_one(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    # The partition was lost and taken again before the fetcher applied the old lease's last
    # commands: a revert() of its last batch (seek back to 1) and its removal (unassign), queued
    # after the new lease's assign at 3. Merged with that assign, the old seek used to win: the
    # new buffer, waiting for offset 3, then dropped every record fetched from 1, for good; and
    # the unassign stopped the fetch of the new lease altogether.
    topic = topic_factory(partitions=1)
    produce(topic, values(6, 1))  # offsets 0..5
    with held_partitions(zk_connect, kafka_config, topic, {0: 3}) as (fetcher, recording, states):
        new = states[0]
        old = PartitionState(new.lease, 0, 100, 1 << 20, new.buffer.budget)
        fetcher.assign([(new, 3)])
        fetcher.seek(old, 1)
        fetcher.unassign(old)
        fetcher.start()
        wait_buffered(states, {0: [3, 4, 5]})
        assert recording.assign_calls == [[(0, 3)]]


class FailingAssign(RecordingConsumer):
    """``incremental_assign`` of one partition fails the first ``failures`` times."""

    def __init__(self, consumer: Any, failures: int) -> None:
        super().__init__(consumer)
        self.failures = failures

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        if self.failures:
            self.failures -= 1
            self.assign_calls.append([(tp.partition, tp.offset) for tp in partitions])
            raise KafkaException(KafkaError(KafkaError._STATE, "assign refused"))
        super().incremental_assign(partitions)


def test_a_partition_whose_assign_failed_is_assigned_again_and_fetched(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    # Used to wait for its seek forever: owned, never fetched.
    topic = topic_factory(partitions=1)
    produce(topic, values(4, 1))
    with held_partitions(zk_connect, kafka_config, topic, {0: 1}) as (fetcher, recording, states):
        failing = FailingAssign(recording, failures=2)
        fetcher.consumer = failing  # type: ignore[assignment]
        fetcher.assign([(states[0], 1)])
        fetcher.start()
        wait_buffered(states, {0: [1, 2, 3]})
        assert failing.assign_calls == [[(0, 1)]] * 3


def test_runs_of_several_partitions_in_one_fetch_reach_each_buffer_in_order(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any
) -> None:
    topic = topic_factory(partitions=3)

    def at(partition: int, *offsets: int) -> list[Message]:
        return [Message(topic=topic, partition=partition, offset=o, value=b"v") for o in offsets]

    transport = Message(topic=topic, partition=1, error=KafkaError(KafkaError._TRANSPORT))
    script = [
        at(0, 0, 1) + at(1, 0) + at(0, 2) + at(2, 0, 1),  # interleaved partitions
        at(1, 1, 2, 3),  # one partition
        [*at(2, 2), transport, *at(2, 3)],  # an error between two messages of one partition
    ]
    with held_partitions(zk_connect, kafka_config, topic, {0: 0, 1: 0, 2: 0}) as (fetcher, recording, states):
        scripted = ScriptedConsumer(recording, script)
        fetcher.consumer = scripted  # type: ignore[assignment]
        fetcher.assign((s, 0) for s in states.values())
        fetcher.start()
        wait_buffered(states, {0: [0, 1, 2], 1: [0, 1, 2, 3], 2: [0, 1, 2, 3]})
        assert fetcher.events_fetched == 11


def test_consumer_properties_pass_through_and_defaults_give_way() -> None:
    conf = consumer_config({"bootstrap.servers": "b:9092", "client.id": "c"}, "orders")
    assert conf["client.id"] == "c" and conf["group.id"] == "jetkafka.orders"
    assert conf["fetch.queue.backoff.ms"] == 50  # not librdkafka's 1,000 ms
    assert conf["queued.min.messages"] == 10_000  # not librdkafka's 100,000
    conf = consumer_config({"fetch.queue.backoff.ms": 1000, "enable.auto.commit": True}, "orders")
    assert conf["fetch.queue.backoff.ms"] == 1000  # a kafka: section overrides a default
    assert conf["enable.auto.commit"] is False  # but never what manual offsets need

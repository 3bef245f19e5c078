"""MirrorSender: one commit request per turn, answers read from librdkafka's on_commit, each
failure reason logged once with its fix (a stand-in consumer; the broker tests are in
tests/kafka_groups/test_mirror_broker.py)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from jetkafka.channel._mirror_sender import MirrorSender
from jetkafka.kafka_groups._mirror import OffsetMirror

A = ("t", 0)
B = ("t", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class FakeConsumer:
    """Records each commit request; consume() answers them all with ``answer`` (None: success)."""

    def __init__(self, sender: MirrorSender) -> None:
        self.sender = sender
        self.requests: list[list[tuple[str, int, int]]] = []
        self.unanswered: list[list[TopicPartition]] = []
        self.answer: KafkaError | None = None
        self.raise_on_commit: KafkaException | None = None

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous
        if self.raise_on_commit is not None:
            raise self.raise_on_commit
        self.requests.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])
        self.unanswered.append(offsets)

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        answers, self.unanswered = self.unanswered, []
        for offsets in answers:
            self.sender.on_commit(self.answer, offsets)
        return []


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sender(clock: Clock) -> MirrorSender:
    sender = MirrorSender(OffsetMirror(0.1, clock=clock), "jetkafka.g")
    sender.consumer = FakeConsumer(sender)
    return sender


def test_every_partition_due_goes_in_one_request_and_the_next_due_time_bounds_the_wait(
    sender: MirrorSender, clock: Clock
) -> None:
    consumer: FakeConsumer = sender.consumer
    sender.mirror.offer(A, 3)
    sender.mirror.offer(B, 4)
    assert sender.send_due(clock.now) == float("inf")  # both sent, nothing waits
    sender.mirror.offer(A, 5)
    assert sender.send_due(clock.now) == pytest.approx(50.1)
    assert consumer.requests == [[("t", 0, 3), ("t", 1, 4)]]
    consumer.consume(1, 0)
    assert sender.mirror.snapshot().partitions[B].confirmed == 4


def test_a_partition_about_to_be_unassigned_is_sent_at_once_and_forgotten(sender: MirrorSender, clock: Clock) -> None:
    consumer: FakeConsumer = sender.consumer
    sender.mirror.offer(A, 3)
    sender.send_due(clock.now)
    sender.mirror.offer(A, 9)
    sender.send_before_unassign([A], clock.now)
    assert consumer.requests == [[("t", 0, 3)], [("t", 0, 9)]]
    consumer.consume(1, 0)
    assert sender.mirror.snapshot().partitions == {}


def test_each_reason_is_logged_once_and_the_recovery_at_info(
    sender: MirrorSender, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    consumer: FakeConsumer = sender.consumer
    consumer.answer = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Broker: Group authorization failed")
    caplog.set_level(logging.INFO, logger="jetkafka.channel")
    for offset in range(20):
        sender.mirror.offer(A, offset)
        clock.now += 2.0  # past the retry delay: every turn sends
        sender.send_due(clock.now)
        consumer.consume(1, 0)
    assert len(consumer.requests) == 20
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1
    message = refused[0].getMessage()
    assert refused[0].levelno == logging.ERROR
    assert "jetkafka.g" in message and "t[0]@0" in message and "GROUP_AUTHORIZATION_FAILED" in message
    assert "grant it READ on the group" in message
    assert sender.mirror.snapshot().failures == {"GROUP_AUTHORIZATION_FAILED": 20}
    consumer.answer = None
    sender.mirror.offer(A, 20)
    clock.now += 2.0
    sender.send_due(clock.now)
    consumer.consume(1, 0)
    again = [r for r in caplog.records if "again" in r.getMessage()]
    assert len(again) == 1 and again[0].levelno == logging.INFO
    assert "t[0]@20" in again[0].getMessage() and "after 20 failed request(s)" in again[0].getMessage()


def test_a_commit_call_that_raises_is_a_failure_and_is_retried(sender: MirrorSender, clock: Clock) -> None:
    consumer: FakeConsumer = sender.consumer
    consumer.raise_on_commit = KafkaException(KafkaError(KafkaError._STATE, "Local: Erroneous state"))
    sender.mirror.offer(A, 7)
    sender.send_due(clock.now)
    assert sender.mirror.snapshot().failures == {"_STATE": 1}
    consumer.raise_on_commit = None
    clock.now += 2.0
    sender.send_due(clock.now)
    assert consumer.requests == [[("t", 0, 7)]]


def test_the_stop_sends_everything_pending_and_waits_for_the_answers(sender: MirrorSender, clock: Clock) -> None:
    consumer: FakeConsumer = sender.consumer
    sender.mirror.offer(A, 1)
    sender.mirror.offer(B, 2)
    sender.send_due(clock.now)
    sender.mirror.offer(A, 5)  # within the interval: pending
    consumer.consume(1, 0)
    sender.flush_at_stop(wait_s=1.0)
    assert consumer.requests[-1] == [("t", 0, 5)]
    assert sender.mirror.in_flight() == {}
    assert sender.mirror.snapshot().commits_sent == 2


def test_the_stop_waits_a_bounded_time_and_names_what_was_not_answered(
    sender: MirrorSender, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    consumer: FakeConsumer = sender.consumer
    consumer.consume = lambda num_messages, timeout: []  # type: ignore[method-assign]  # a broker that never answers
    sender.mirror.offer(A, 12)
    caplog.set_level(logging.WARNING, logger="jetkafka.channel")
    sender.flush_at_stop(wait_s=0.2)
    assert consumer.requests == [[("t", 0, 12)]]
    assert any("t[0]@12" in r.getMessage() and "not confirmed" in r.getMessage() for r in caplog.records)
    assert sender.mirror.snapshot().partitions == {}  # forgotten: never answered now

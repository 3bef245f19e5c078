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
        self.closed = False

    def close(self) -> None:
        self.closed = True

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
    sender.send_before_unassign([A], [], clock.now)
    assert consumer.requests == [[("t", 0, 3)], [("t", 0, 9)]]
    consumer.consume(1, 0)
    assert sender.mirror.snapshot().partitions == {}


def test_a_lost_partition_drops_what_it_had_not_sent(sender: MirrorSender, clock: Clock) -> None:
    consumer: FakeConsumer = sender.consumer
    sender.mirror.offer(A, 3)
    sender.mirror.offer(B, 4)
    sender.send_due(clock.now)
    sender.mirror.offer(A, 9)  # landed, not sent yet: A is lost before its turn
    sender.mirror.offer(B, 10)
    sender.send_before_unassign([B], [A], clock.now)
    assert consumer.requests == [[("t", 0, 3), ("t", 1, 4)], [("t", 1, 10)]]
    consumer.consume(1, 0)
    clock.now += 5.0
    sender.send_due(clock.now)
    sender.flush(wait_s=0)
    assert [r for r in consumer.requests if ("t", 0, 9) in r] == []


def test_a_thawed_zombie_sends_nothing_while_its_lease_has_run_out(clock: Clock) -> None:
    lease = {"runs": True}
    sender = MirrorSender(OffsetMirror(0.1, clock=clock), "jetkafka.g", may_send=lambda: lease["runs"])
    consumer = sender.consumer = FakeConsumer(sender)
    sender.mirror.offer(A, 3)
    sender.send_due(clock.now)
    sender.mirror.offer(A, 7)
    lease["runs"] = False  # frozen past the session timeout: the local lease ran out
    clock.now += 30.0
    assert sender.send_due(clock.now) == pytest.approx(clock.now + 0.1)  # looks again soon
    assert consumer.requests == [[("t", 0, 3)]]
    # Unassigned once the instance learns the session expired: released or lost, nothing goes.
    sender.send_before_unassign([A], [], clock.now)
    assert consumer.requests == [[("t", 0, 3)]]
    # A lease that runs again (ZooKeeper answered within the session): pending offsets go.
    sender.mirror.offer(B, 5)
    lease["runs"] = True
    sender.send_due(clock.now)
    assert consumer.requests == [[("t", 0, 3)], [("t", 1, 5)]]


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
    sender.flush(wait_s=1.0)
    sender.close(lambda key: False, wait_s=0)
    assert consumer.closed
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
    sender.flush(wait_s=0.2)
    sender.close(lambda key: False, wait_s=0.2)
    assert consumer.requests == [[("t", 0, 12)]]
    assert any("t[0]@12" in r.getMessage() and "not answered by the broker" in r.getMessage() for r in caplog.records)
    assert sender.mirror.snapshot().partitions == {}  # forgotten: never answered now


def test_only_partitions_held_are_sent_and_answers_are_served_every_turn(clock: Clock) -> None:
    held = {A}
    sender = MirrorSender(OffsetMirror(0.1, clock=clock), "jetkafka.g", holds=lambda key: key in held)
    consumer = sender.consumer = FakeConsumer(sender)
    sender.mirror.offer(A, 3)
    sender.mirror.offer(B, 4)  # no longer in the table (released, its unassign on its way)
    sender.send_due(clock.now)
    assert consumer.requests == [[("t", 0, 3)]]
    assert sender.mirror.pending() == {B: 4}  # waits for its unassign: sent or dropped there
    clock.now += 1.0
    sender.send_due(clock.now)  # serves A's answer first (no fetch involved)
    assert sender.mirror.snapshot().partitions[A].confirmed == 3
    sender.send_before_unassign([B], [], clock.now)
    assert consumer.requests[-1] == [("t", 1, 4)]

"""Poison records under each on_error mode, and each out-of-range policy, for real."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from jetkafka import BatchResponse, EventBatch, OffsetOutOfRange, PartitionSource
from jetkafka.channel._dead_letter import DeadLetterSink
from jetkafka.config import parse_config
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.ops._metrics import ChannelMetrics
from tests.support.channels import (
    RecordingProcessor,
    channel_config,
    committed_offsets,
    make_channel,
    values,
    wait_until,
)

POISON = b"poison"


def recorded_failure(channel: Any, attempts: int) -> Any:
    """The only partition's failure once the channel recorded ``attempts`` of them: the processor's
    raise comes first, the channel's record of it (and of the next attempt) a moment later."""
    def recorded() -> bool:
        failure = channel.partitions()[0].failure
        return failure is not None and failure.attempts >= attempts

    wait_until(recorded, what=f"failed attempt {attempts} recorded")
    return channel.partitions()[0].failure


def records_with_poison(count: int, poison_at: int) -> list[tuple[int, bytes, bytes]]:
    recs = values(count, 1)
    recs[poison_at] = (0, b"bad", POISON)
    return recs


class PoisonAware(RecordingProcessor):
    """Fails any batch holding the poison record; records only successful batches."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_batches: list[tuple[int, int]] = []

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if any(e.value == POISON for e in events):
            self.failed_batches.append((events.first_offset, len(events)))
            raise ValueError("cannot parse record")
        return super().on_next_batch(source, events)


def test_retry_mode_never_moves_past_the_poison(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, records_with_poison(100, 57))
    proc = PoisonAware()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=50, error_backoff_ms=10, error_backoff_max_ms=20):
        wait_until(lambda: len(proc.failed_batches) >= 6, what="repeated re-delivery")
        assert committed_offsets(zk, "g", topic) == {0: 50}
    assert sorted(proc.ids()) == list(range(50))
    assert set(proc.failed_batches) == {(50, 50)}


def test_skip_mode_isolates_and_skips_only_the_poison(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, records_with_poison(200, 57))
    proc = PoisonAware()
    on_error = {"mode": "skip", "max_attempts": 2}
    with make_channel(
        zk_connect, kafka_config, topic, proc, batch_max_events=50, error_backoff_ms=10, on_error=on_error
    ) as channel:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 200}, what="commit past the poison")
        assert channel.stats.errors[((topic, 0), "skipped")] == 1
    ids = proc.ids()
    # Every good record processed exactly once; the poison never counted as processed.
    assert sorted(ids) == [i for i in range(200) if i != 57]
    # Two attempts of the whole batch, then two of the isolated poison record.
    assert proc.failed_batches == [(50, 50), (50, 50), (57, 1), (57, 1)]


def test_dead_letter_mode_sends_the_poison_with_error_headers(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    dlq = topic_factory(partitions=1)
    produce(topic, records_with_poison(120, 57))
    proc = PoisonAware()
    on_error = {"mode": "dead-letter", "max_attempts": 1, "dead_letter_topic": dlq}
    with make_channel(
        zk_connect, kafka_config, topic, proc, batch_max_events=50, error_backoff_ms=10, on_error=on_error
    ):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 120})
    assert sorted(proc.ids()) == [i for i in range(120) if i != 57]

    consumer = Consumer({**kafka_config, "group.id": "dlq-reader"})
    consumer.assign([TopicPartition(dlq, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        got = [m for m in consumer.consume(10, 1.0) if m.error() is None]
    consumer.close()
    assert len(got) == 1
    record = got[0]
    assert record.value() == POISON and record.key() == b"bad"
    headers = dict(record.headers())
    assert headers["jetkafka.source.topic"] == topic.encode()
    assert headers["jetkafka.source.offset"] == b"57"
    assert headers["jetkafka.error.class"] == b"ValueError"
    assert headers["jetkafka.error.message"] == b"cannot parse record"
    assert headers["jetkafka.group"] == b"g"


def out_of_range_setup(zk, kafka_config, topic_factory, produce) -> str:
    """100 records, committed offset 10, then the log truncated below 50."""
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    OffsetStore(zk, GroupPaths("g")).write_unfenced(topic, 0, 10)
    admin = AdminClient(dict(kafka_config))
    result = admin.delete_records([TopicPartition(topic, 0, 50)])
    for future in result.values():
        future.result(timeout=10)
    return topic


class RangeRecorder(RecordingProcessor):
    def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
        self.record("exception", source, error)
        return None

    def on_reposition(self, source: PartitionSource, old_offset: int, reason: str) -> None:
        self.record("reposition", source, (old_offset, source.head_offset, reason))


def test_out_of_range_earliest(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = out_of_range_setup(zk, kafka_config, topic_factory, produce)
    proc = RangeRecorder()
    with make_channel(zk_connect, kafka_config, topic, proc, on_out_of_range="earliest") as channel:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100})
        lost = channel.stats.loss_counts()
    assert sorted(proc.ids()) == list(range(50, 100))
    (call,) = proc.calls_named("exception")
    error = call[2]
    assert isinstance(error, OffsetOutOfRange)
    assert (error.offset, error.low, error.high) == (10, 50, 100)
    assert lost == {"retention": 40, "skipped": 0, "truncated": 0}  # offsets 10..49, deleted unread
    assert proc.calls_named("reposition") == [("reposition", (topic, 0), (10, 50, "out_of_range"))]


def test_out_of_range_latest(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = out_of_range_setup(zk, kafka_config, topic_factory, produce)
    proc = RangeRecorder()
    with make_channel(zk_connect, kafka_config, topic, proc, on_out_of_range="latest") as channel:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100})
        produce(topic, values(5, 1, start=100))
        wait_until(lambda: len(proc.delivered) == 5)
        lost = channel.stats.loss_counts()
    assert sorted(proc.ids()) == list(range(100, 105))
    assert lost == {"retention": 40, "skipped": 50, "truncated": 0}


@pytest.mark.parametrize("policy", ["earliest", "latest"])
def test_out_of_range_above_the_log_end_goes_on_at_the_end(
    zk, zk_connect, kafka_config, topic_factory, produce, policy: str
) -> None:
    """A committed offset past the log's end (the log lost its tail: an unclean leader election,
    a broker restored from a backup) is not the same event as one below its start: reading goes
    on at the end, whatever the policy, instead of the whole partition being delivered again."""
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    OffsetStore(zk, GroupPaths("g")).write_unfenced(topic, 0, 150)  # 100..149 processed, then gone
    proc = RangeRecorder()
    with make_channel(zk_connect, kafka_config, topic, proc, on_out_of_range=policy) as channel:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="the end committed")
        produce(topic, values(5, 1, start=1000))  # written after the loss: offsets 100..104
        wait_until(lambda: len(proc.delivered) == 5, what="the new records")
        time.sleep(0.5)
        lost = channel.stats.loss_counts()
    assert sorted(proc.ids()) == list(range(1000, 1005))
    assert sorted(offset for _, _, offset, _ in proc.delivered) == list(range(100, 105))
    (call,) = proc.calls_named("exception")
    error = call[2]
    assert isinstance(error, OffsetOutOfRange) and (error.offset, error.low, error.high) == (150, 0, 100)
    assert lost == {"retention": 0, "skipped": 0, "truncated": 50}


def test_out_of_range_fail_halts_until_repositioned(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = out_of_range_setup(zk, kafka_config, topic_factory, produce)
    proc = RangeRecorder()
    with make_channel(zk_connect, kafka_config, topic, proc, on_out_of_range="fail") as channel:
        wait_until(lambda: len(proc.calls_named("exception")) == 1, what="out-of-range reported")
        time.sleep(1.0)
        assert proc.delivered == []
        assert committed_offsets(zk, "g", topic) == {0: 10}
        assert channel.owned_partitions() == [(topic, 0)]
        halted = lambda: sum(p.halted for p in ChannelMetrics(channel).view().partitions)  # noqa: E731
        assert halted() == 1  # what jetkafka_halted_partitions reports: the alert
        failure = channel.partitions()[0].failure  # what status, the page and /readyz show
        assert failure is not None and failure.state == "halted" and failure.next_attempt is None
        assert "offset 10 is out of range" in failure.error, failure.error
        assert time.time() - 30 < failure.since <= time.time()
        channel.reposition(topic, 0, 50)
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100})
        assert halted() == 0
        assert channel.partitions()[0].failure is None
    assert sorted(proc.ids()) == list(range(50, 100))


class SeeksPastTheEnd(RecordingProcessor):
    """Answers its first batch with ``get_next().seek(500)``, past the log's end, committing
    nothing; advances every later batch."""

    def __init__(self) -> None:
        super().__init__(self._respond)
        self.first = True

    def _respond(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if self.first:
            self.first = False
            return BatchResponse.get_next().seek(500)
        return BatchResponse.advance()

    def on_reposition(self, source: PartitionSource, old_offset: int, reason: str) -> None:
        self.record("reposition", source, (old_offset, source.head_offset, reason))


def test_out_of_range_past_the_end_never_commits_over_what_was_not_committed(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    """A processor that gathers without committing (as the Spark processor does) is past the
    log's end while its last commit is below it: the records between are still on the broker
    and were never committed. The move goes back to the last commit, not to the end, so they
    are delivered again instead of being committed unseen."""
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    proc = SeeksPastTheEnd()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=10) as channel:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="every record committed")
        lost = channel.stats.loss_counts()
    offsets = [offset for _, _, offset, _ in proc.delivered]
    assert offsets == list(range(10)) + list(range(100)), offsets[:20]
    assert proc.calls_named("reposition") == [("reposition", (topic, 0), (500, 0, "out_of_range"))]
    assert lost == {"retention": 0, "skipped": 0, "truncated": 0}  # nothing processed was gone


# -- what operators are shown of a partition that does not move on ------------------------------


def test_a_retried_batch_shows_since_when_how_often_why_and_when_next(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, records_with_poison(100, 57))
    proc = PoisonAware()
    started = time.time()
    with make_channel(
        zk_connect, kafka_config, topic, proc, batch_max_events=50, error_backoff_ms=50, error_backoff_max_ms=400
    ) as channel:
        wait_until(lambda: len(proc.failed_batches) >= 3, what="three failed attempts")
        recorded_failure(channel, 3)
        (snapshot,) = channel.partitions()
        failure = snapshot.failure
        assert failure is not None and failure.state == "retrying"
        assert failure.attempts >= 3
        assert failure.error == "ValueError: cannot parse record"
        assert failure.offsets == (50, 99)
        assert started <= failure.since <= time.time()
        assert failure.next_attempt is not None and failure.next_attempt > failure.since
        first_since = failure.since
        wait_until(lambda: (channel.partitions()[0].failure or failure).attempts > failure.attempts, what="one more")
        again = channel.partitions()[0].failure
        assert again is not None and again.since == first_since  # one run of failures, one start
        # An operator moves the partition past the poison: it moves on, and nothing shows.
        channel.reposition(topic, 0, 58)
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="the rest committed")
        assert channel.partitions()[0].failure is None


def test_an_isolation_shows_until_the_record_is_given_up_on(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, records_with_poison(100, 57))
    seen: list[str] = []

    class Watching(PoisonAware):
        def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
            (snapshot,) = channel.partitions()
            if snapshot.failure is not None:
                seen.append(snapshot.failure.state)
            return super().on_next_batch(source, events)

    on_error = {"mode": "skip", "max_attempts": 2}
    channel = make_channel(
        zk_connect, kafka_config, topic, Watching(), batch_max_events=50, error_backoff_ms=10, on_error=on_error
    )
    with channel:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="commit past the poison")
        assert channel.partitions()[0].failure is None
    # Retried as a whole once, then record by record until the poison was skipped.
    assert seen[0] == "retrying" and set(seen[1:]) == {"isolating"}, seen


@pytest.mark.parametrize("mode", ["skip", "dead-letter"])
def test_a_changed_on_error_applies_at_the_next_attempt_not_after_the_back_off(
    zk, zk_connect, kafka_config, topic_factory, produce, mode: str
) -> None:
    """retry -> skip (or dead-letter) by a hot deploy: the partition waiting out a long back-off
    is tried again at once under the new policy, and the poison record is given up on within a
    second. With dead-letter, the attempt may come before the hot deploy has opened the
    dead-letter producer: it waits for it, briefly, instead of failing the turn."""
    topic = topic_factory(partitions=1)
    produce(topic, records_with_poison(20, 10))
    proc = PoisonAware()
    backoff = {"batch_max_events": 50, "error_backoff_ms": 60_000, "error_backoff_max_ms": 60_000}
    with make_channel(zk_connect, kafka_config, topic, proc, **backoff) as channel:
        wait_until(lambda: len(proc.failed_batches) == 1, what="the first failure")
        failure = recorded_failure(channel, 1)
        assert failure is not None and failure.next_attempt is not None
        assert failure.next_attempt - time.time() > 50  # a long back-off is scheduled
        on_error: dict[str, object] = {"mode": mode, "max_attempts": 1}
        if mode == "dead-letter":
            on_error["dead_letter_topic"] = topic_factory(partitions=1)
        data = channel_config(zk_connect, kafka_config, [topic], **backoff, on_error=on_error)
        changed = time.monotonic()
        assert channel.reconfigure(parse_config(data)).kind == "in-place"
        if mode == "skip":
            skipped = lambda: channel.stats.errors[((topic, 0), "skipped")] == 1  # noqa: E731
            wait_until(skipped, timeout=10, what="the poison skipped")
        else:  # the record is tried alone under the new policy; the producer's first send follows
            wait_until(lambda: (10, 1) in proc.failed_batches, timeout=10, what="the poison tried alone")
        assert time.monotonic() - changed < 1.0
        if mode == "dead-letter":
            dead_lettered = lambda: channel.stats.errors[((topic, 0), "dead_lettered")] == 1  # noqa: E731
            wait_until(dead_lettered, what="the poison dead-lettered")
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 20}, what="commit past the poison")
        assert channel.partitions()[0].failure is None
    assert sorted(proc.ids()) == [i for i in range(20) if i != 10]


def test_an_attempt_before_the_new_dead_letter_producer_is_there_waits_for_it(
    zk, zk_connect, kafka_config, topic_factory, produce, caplog
) -> None:
    """The window of a hot deploy to dead-letter between the new policy (which wakes the partition)
    and its producer (opened next), held open here: the record waits for the producer, its turn
    does not fail."""
    topic = topic_factory(partitions=1)
    produce(topic, records_with_poison(5, 0))
    proc = PoisonAware()
    backoff = {"batch_max_events": 1, "error_backoff_ms": 60_000, "error_backoff_max_ms": 60_000}
    with make_channel(zk_connect, kafka_config, topic, proc, **backoff) as channel:
        wait_until(lambda: len(proc.failed_batches) == 1, what="the first failure")
        on_error = {"mode": "dead-letter", "max_attempts": 1, "dead_letter_topic": topic_factory(partitions=1)}
        new = parse_config(channel_config(zk_connect, kafka_config, [topic], **backoff, on_error=on_error))
        runner = channel._runner
        assert runner is not None and runner.failures.dead_letter is None
        runner.config = new.channel  # what the hot deploy does first; the producer comes after
        wait_until(lambda: len(proc.failed_batches) >= 3, what="attempts waiting for the producer")
        failure = channel.partitions()[0].failure
        assert failure is not None and failure.next_attempt is not None
        assert failure.next_attempt - time.time() < 1  # a short wait, not the back-off
        runner.failures.dead_letter = DeadLetterSink(new.kafka, on_error["dead_letter_topic"], "g")
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 5}, what="commit past the poison")
        assert channel.stats.errors[((topic, 0), "dead_lettered")] == 1
    assert "turn failed" not in caplog.text
    assert sorted(proc.ids()) == [1, 2, 3, 4]

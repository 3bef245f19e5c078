"""Ordering, threading and every BatchResponse kind, on a real ZooKeeper and broker."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition

from jetkafka import BatchResponse, EventBatch, InboundChannel, PartitionSource
from jetkafka.channel import ChannelContext
from tests.support.channels import (
    RecordingProcessor,
    channel_config,
    committed_offsets,
    make_channel,
    values,
    wait_until,
)


def test_every_event_once_in_order_one_thread_per_partition(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=6)
    produce(topic, values(6000, 6))
    proc = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, proc, threads=4, batch_max_events=50) as channel:
        wait_until(lambda: len(proc.delivered) >= 6000, what="6000 events")
        wait_until(lambda: committed_offsets(zk, "g", topic) == {p: 1000 for p in range(6)}, what="commits")
        assert len(channel.owned_partitions()) == 6
    assert proc.violations == []
    assert sorted(proc.ids()) == list(range(6000))
    for p in range(6):
        offsets = [o for t, part, o, _ in proc.delivered if part == p]
        assert offsets == list(range(1000)), f"partition {p} out of order"


def test_a_worker_with_a_backlog_gives_way_to_a_waiting_partition(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    # One worker, two partitions with a backlog each: it keeps a partition for its next batch
    # only while no other partition waits, so the batches alternate instead of one backlog
    # being worked off first.
    topic = topic_factory(partitions=2)
    produce(topic, values(2000, 2))
    heads: list[int] = []

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        heads.append(source.partition)
        return BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, threads=1, batch_max_events=10):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 1000, 1: 1000}, what="commits")
    assert proc.violations == []
    both = max(heads.index(0), heads.index(1))  # from here on both partitions had data
    last_of_either = min(len(heads) - 1 - heads[::-1].index(p) for p in (0, 1))
    longest, run = 1, 1
    for before, now in zip(heads[both:last_of_either], heads[both + 1 : last_of_either + 1], strict=True):
        run = run + 1 if now == before else 1
        longest = max(longest, run)
    assert longest <= 3, f"{longest} batches of one partition in a row while the other waited"


def test_get_next_moves_on_without_committing(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(300, 1))
    proc = RecordingProcessor(lambda s, e: BatchResponse.get_next())
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: len(proc.delivered) == 300)
        time.sleep(0.3)
        # The start offset (earliest = 0) was committed at take-over; nothing since.
        assert committed_offsets(zk, "g", topic) == {0: 0}
        assert sorted(proc.ids()) == list(range(300))


def test_advance_commits_the_offset_after_the_batch(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(250, 1))
    proc = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 250}, what="commit of 250")


def test_revert_rereads_from_the_last_commit(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(300, 1))
    seen: list[int] = []

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        seen.append(source.head_offset)
        if source.head_offset == 0:
            return BatchResponse.advance()  # commit 100
        if source.head_offset == 100 and seen.count(100) == 1:
            return BatchResponse.revert()  # back to 100
        return BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 300})
    assert seen == [0, 100, 100, 200]
    ids = proc.ids()
    assert sorted(set(ids)) == list(range(300))
    assert [i for i in range(300) if ids.count(i) == 2] == list(range(100, 200))


def test_revert_without_commit_rereads_from_the_start_offset(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(200, 1))
    heads: list[int] = []

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        heads.append(source.head_offset)
        if len(heads) == 2:
            return BatchResponse.revert()
        return BatchResponse.get_next() if len(heads) == 1 else BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 200})
    # get_next at 0, revert at 100 goes back to the committed start (0), never below it.
    assert heads[:3] == [0, 100, 0]


def test_seek_skips_and_advance_with_seek_commits_the_seek_offset(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(500, 1))
    heads: list[int] = []

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        heads.append(source.head_offset)
        if source.head_offset == 0:
            return BatchResponse.get_next().seek(300)
        if source.head_offset == 300:
            return BatchResponse.advance().seek(450)
        return BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 500})
    assert heads == [0, 300, 450]
    assert sorted(proc.ids()) == list(range(100)) + list(range(300, 400)) + list(range(450, 500))


def test_wait_keeps_the_partition_away_from_workers(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(200, 1))
    times: list[float] = []

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        times.append(time.monotonic())
        return BatchResponse.advance().wait(800) if len(times) == 1 else BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: len(times) >= 2)
    assert times[1] - times[0] >= 0.8


def test_processor_that_raises_gets_the_same_batch_again(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(200, 1))
    attempts: list[tuple[int, int]] = []

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        attempts.append((source.head_offset, len(events)))
        if source.head_offset == 100 and len(attempts) < 4:
            raise RuntimeError("downstream unavailable")
        return BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100, error_backoff_ms=20):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 200})
    assert attempts == [(0, 100), (100, 100), (100, 100), (100, 100)]
    errors = proc.calls_named("exception")
    assert len(errors) == 2 and all(isinstance(e[2], RuntimeError) for e in errors)
    # Nothing skipped, nothing rewound below the last commit.
    assert sorted(set(proc.ids())) == list(range(200))


def test_on_exception_may_skip_the_batch(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(300, 1))

    class Skipper(RecordingProcessor):
        def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
            self.record("exception", source, source.head_offset)
            return BatchResponse.advance()

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        if source.head_offset == 100:
            raise ValueError("poison")
        return BatchResponse.advance()

    proc = Skipper(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 300})
    assert proc.calls_named("exception") == [("exception", (topic, 0), 100)]


def test_missing_response_is_an_error_not_a_skip(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(10, 1))
    calls: list[int] = []

    def respond(source: PartitionSource, events: EventBatch) -> Any:
        calls.append(source.head_offset)
        return None if len(calls) == 1 else BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, error_backoff_ms=10):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 10})
    assert calls == [0, 0]
    (error,) = proc.calls_named("exception")
    assert "must return a BatchResponse" in str(error[2])


def test_idle_fires_once_per_quiet_period(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(5, 1))
    proc = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, proc, idle_ms=300):
        wait_until(lambda: len(proc.calls_named("idle")) == 1, what="first idle")
        time.sleep(0.8)
        assert len(proc.calls_named("idle")) == 1
        produce(topic, values(5, 1, start=5))
        wait_until(lambda: len(proc.calls_named("idle")) == 2, what="idle after new events")
    assert proc.calls_named("idle")[-1][2] == 10  # idle reports the next offset to read


def test_termination_on_shutdown_commits_what_was_processed(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(400, 2))
    proc = RecordingProcessor(lambda s, e: BatchResponse.get_next())
    channel = make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=50)
    channel.start()
    wait_until(lambda: len(proc.delivered) == 400)
    assert channel.shutdown(timeout=10) is True
    terminations = proc.calls_named("termination")
    assert sorted((k, off) for _, k, off in terminations) == [((topic, 0), 200), ((topic, 1), 200)]
    assert committed_offsets(zk, "g", topic) == {0: 200, 1: 200}
    assert not zk.get_children(f"/consumers/g/owners/{topic}")
    assert not zk.get_children("/consumers/g/ids")


def test_batches_are_bounded_by_bytes(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, b"x" * 1000) for _ in range(50)])
    sizes: list[int] = []

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        sizes.append(len(events))
        return BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_bytes=10_000):
        wait_until(lambda: sum(sizes) == 50)
    assert max(sizes) == 10


def test_pause_stops_delivery_and_resume_continues_at_the_same_offset(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(200, 2))
    proc = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=20) as channel:
        wait_until(lambda: len(proc.delivered) == 200)
        channel.pause()
        produce(topic, values(200, 2, start=200))
        time.sleep(1.0)
        assert len(proc.delivered) == 200
        assert len(channel.owned_partitions()) == 2
        channel.resume()
        wait_until(lambda: len(proc.delivered) == 400)
    assert sorted(proc.ids()) == list(range(400))


def test_pausing_one_partition_leaves_the_others_running(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=2)
    proc = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, proc) as channel:
        wait_until(lambda: len(channel.owned_partitions()) == 2)
        channel.pause(topic, 0)
        produce(topic, values(100, 2))
        wait_until(lambda: len(proc.delivered) == 50)
        time.sleep(0.5)
        assert {p for _, p, _, _ in proc.delivered} == {1}
        channel.resume(topic, 0)
        wait_until(lambda: len(proc.delivered) == 100)


def test_reposition_moves_an_owned_partition(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    proc = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, proc) as channel:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100})
        old = channel.reposition(topic, 0, 40)
        assert old == 100
        wait_until(lambda: len(proc.delivered) == 160)
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100})
    ids = proc.ids()
    assert [i for i in range(100) if ids.count(i) == 2] == list(range(40, 100))


def test_threads_never_share_a_partition_under_contention(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=8)
    produce(topic, values(4000, 8))
    threads_seen: dict[int, set[int]] = {p: set() for p in range(8)}

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        threads_seen[source.partition].add(threading.get_ident())
        return BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, threads=3, batch_max_events=10):
        wait_until(lambda: len(proc.delivered) == 4000)
    assert proc.violations == []
    for p in range(8):
        assert [o for _, part, o, _ in proc.delivered if part == p] == list(range(500))
    # Partitions did change hands between threads, so the rule was exercised.
    assert any(len(s) > 1 for s in threads_seen.values())


def test_paused_partitions_are_still_released_at_shutdown(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(100, 2))
    proc = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, proc)
    channel.start()
    wait_until(lambda: len(proc.delivered) == 100)
    channel.pause()
    # A release does not wait for a resume: shutdown completes well within its timeout.
    assert channel.shutdown(timeout=5) is True
    assert len(proc.calls_named("termination")) == 2
    assert not zk.get_children(f"/consumers/g/owners/{topic}")


def test_seek_back_into_the_batch_redelivers_its_tail(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    heads: list[tuple[int, int]] = []

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        heads.append((source.head_offset, len(events)))
        if len(heads) == 1:
            return BatchResponse.advance().seek(30)  # handled 0..29 only
        return BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=50) as channel:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100})
        fetched = channel._fetcher.events_fetched if channel._fetcher else -1
    assert heads[:2] == [(0, 50), (30, 50)]
    ids = proc.ids()
    assert [i for i in range(100) if ids.count(i) == 2] == list(range(30, 50))
    assert fetched == 100  # the tail came from the buffer, not from the broker again


def test_resuming_a_partition_not_held_clears_its_pause(zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(10, 1))
    proc = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, proc)
    # Before start nothing is held: a pause and resume of the partition must cancel out.
    channel.pause(topic, 0)
    channel.resume(topic, 0)
    with channel:
        wait_until(lambda: len(proc.delivered) == 10, what="delivery of a partition resumed before it was held")


def test_a_partition_paused_for_a_full_buffer_fetches_again_after_a_revert(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(400, 1))
    heads: list[int] = []

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        heads.append(source.head_offset)
        if len(heads) == 1:
            time.sleep(1.0)  # let the fetcher fill the buffer far past its share and pause
            return BatchResponse.revert()
        return BatchResponse.advance()

    proc = RecordingProcessor(respond)
    with make_channel(
        zk_connect, kafka_config, topic, proc, batch_max_events=5, buffer_max_events=5, buffer_max_bytes=10_000
    ):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 400}, what="every record after the revert")
    assert heads[:2] == [0, 0]


@pytest.mark.parametrize("downstream", [True, False])
def test_no_partition_is_paused_while_the_processor_waits_downstream(
    zk, zk_connect, kafka_config, topic_factory, produce, downstream
) -> None:
    # The processor waits for a sink every partition shares (as the Spark collector waits for
    # the driver) while a backlog arrives: the buffers fill far beyond their share. A pause then
    # would make librdkafka drop what it fetched ahead, to fetch it again on resume. The same
    # wait without waiting_downstream() pauses a partition: that is what is counted.
    topic = topic_factory(partitions=2)
    produce(topic, values(4, 2))
    sink_open = threading.Event()
    pauses: list[int] = []
    waiting: list[int] = []
    context: list[ChannelContext] = []

    class Counting:
        def __init__(self, consumer: Any) -> None:
            self._consumer = consumer

        def pause(self, partitions: list[TopicPartition]) -> None:
            pauses.extend(tp.partition for tp in partitions)
            self._consumer.pause(partitions)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._consumer, name)

    class WaitsForSink(RecordingProcessor):
        def on_start(self, ctx: ChannelContext) -> None:
            context.append(ctx)

    def respond(source: PartitionSource, events: EventBatch) -> BatchResponse:
        if downstream:
            with context[0].waiting_downstream():
                waiting.append(source.partition)
                sink_open.wait(30)
        else:
            waiting.append(source.partition)
            sink_open.wait(30)
        return BatchResponse.advance()

    proc = WaitsForSink(respond)
    wrap = lambda consumer, role: Counting(consumer) if role == "fetch" else consumer  # noqa: E731
    # Without rests at the log end, which pause too (jetkafka.channel._pacing): counted here
    # are the pauses for a partition's share alone.
    config = channel_config(
        zk_connect, kafka_config, [topic], batch_max_events=20, buffer_max_events=20, log_end_pace_ms=0
    )
    with InboundChannel.from_dict(config, processor=proc, wrap_consumer=wrap) as channel:
        wait_until(lambda: len(waiting) >= 1, what="a worker waiting for the sink")
        # 1,000 per partition (50 x a partition's share), each partition's as one record batch:
        # the first fetch after it then takes far beyond the share. Sent in small batches (a
        # loaded machine), the budget would be spent by the first few and the fetcher would wait
        # for room with no partition beyond its share, the case this test is not about.
        backlog = Producer({**kafka_config, "linger.ms": 2000, "batch.num.messages": 10_000})
        for partition, key, value in values(2000, 2, start=4):
            backlog.produce(topic, value=value, key=key, partition=partition)
        assert backlog.flush(30) == 0
        if downstream:
            buffered = lambda: sum(p.buffered for p in channel.partitions())  # noqa: E731
            wait_until(lambda: buffered() >= 500, what="the backlog buffered far beyond the shares")
            time.sleep(0.5)  # a pause would follow the buffering of its run at once
        else:
            wait_until(lambda: bool(pauses), what="a pause of the partition far beyond its share")
        held = list(pauses)
        sink_open.set()
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 1002, 1: 1002}, what="every event")
    assert proc.violations == []
    assert sorted(int(v) for _, _, _, v in proc.delivered) == list(range(2004))
    if downstream:
        assert held == []
    else:
        assert held != []

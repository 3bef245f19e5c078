"""One partition's trouble stays its own: a partition that cannot drain, or drains slowly, holds
back no other partition, and keeps at most its own share of the buffer budget while they want room.

Each test: three partitions, ``buffer_max_events: 200`` (a budget of 600), ``batch_max_events: 20``.
Partition 0 gets a backlog first and stops draining with far more than its share buffered (the
whole budget: nobody else wanted room then); then partitions 1 and 2 get records. Before shares
were kept, the fetcher waited for room that partition 0 never gave back: none of their records
was processed (or they went at partition 0's pace). Every event is counted: each record of every
partition is delivered exactly once, in order, including what partition 0 gave back and fetched
again once it drained.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from jetkafka import BatchResponse, EventBatch, InboundChannel, PartitionSource
from jetkafka.ops._metrics import ChannelMetrics
from tests.support.channels import RecordingProcessor, channel_config, committed_offsets, wait_until

SHARE = 200
BACKLOG = 3000
OTHERS = 1000
SETTINGS: dict[str, Any] = {
    "batch_max_events": 20,
    "buffer_max_events": SHARE,
    "error_backoff_ms": 50,
    "error_backoff_max_ms": 200,
}


def records(partition: int, count: int, start: int = 0) -> list[tuple[int, bytes, bytes]]:
    return [(partition, b"k", f"{partition}:{i}".encode()) for i in range(start, start + count)]


def buffered(channel: InboundChannel, partition: int) -> int:
    return sum(p.buffered for p in channel.partitions() if p.partition == partition)


def delivered_offsets(proc: RecordingProcessor, partition: int) -> list[int]:
    with proc.lock:
        return [offset for _, p, offset, _ in proc.delivered if p == partition]


def assert_every_record_once(proc: RecordingProcessor, counts: dict[int, int]) -> None:
    assert proc.violations == []
    for partition, count in counts.items():
        assert delivered_offsets(proc, partition) == list(range(count)), f"partition {partition}"


def others_get_their_records(zk: Any, channel: InboundChannel, topic: str, produce: Any, stalled: bool = True) -> float:
    """Produce to partitions 1 and 2; seconds until both are committed to their end. Partition
    0, if it cannot drain, keeps no more than its share meanwhile (one that drains slowly is
    held where it is, and gives back its excess only once the budget is spent)."""
    started = time.monotonic()
    produce(topic, records(1, OTHERS) + records(2, OTHERS))
    if stalled:
        wait_until(lambda: buffered(channel, 0) <= SHARE, what="partition 0 giving back what it borrowed")
    wait_until(
        lambda: {p: o for p, o in committed_offsets(zk, "g", topic).items() if p} == {1: OTHERS, 2: OTHERS},
        timeout=60,
        what="partitions 1 and 2 processed while partition 0 does not drain",
    )
    elapsed = time.monotonic() - started
    if stalled:
        assert buffered(channel, 0) <= SHARE, "partition 0 fetched beyond its share again while it cannot drain"
    share = channel.config.channel.buffer_max_events
    assert sum(p.buffered for p in channel.partitions()) <= 3 * share + 500  # the budget, and one poll
    return elapsed


def hog_the_budget(channel: InboundChannel, proc: RecordingProcessor) -> None:
    wait_until(lambda: buffered(channel, 0) >= 2 * SHARE, what="partition 0 borrowing the budget")
    assert delivered_offsets(proc, 1) == delivered_offsets(proc, 2) == []


class Poisoned(RecordingProcessor):
    """Raises on partition 0's offset 100 (before anything of the batch is recorded) until cured."""

    def __init__(self) -> None:
        super().__init__()
        self.cured = threading.Event()
        self.failures = 0

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if source.partition == 0 and not self.cured.is_set() and any(e.offset == 100 for e in events):
            self.failures += 1
            raise ValueError("cannot parse record 100")
        return super().on_next_batch(source, events)


def test_a_poison_record_under_retry_holds_back_no_other_partition(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=3)
    proc = Poisoned()
    produce(topic, records(0, BACKLOG))
    config = channel_config(zk_connect, kafka_config, [topic], **SETTINGS)
    with InboundChannel.from_dict(config, processor=proc) as channel:
        hog_the_budget(channel, proc)
        others_get_their_records(zk, channel, topic, produce)
        assert committed_offsets(zk, "g", topic)[0] <= 100  # still stuck on the poison
        # What an operator sees: the stuck partition gave back what it borrowed, and holds its share.
        view = {p.key[1]: p for p in ChannelMetrics(channel).view().partitions}
        assert view[0].figures.given_back >= SHARE and view[0].buffered == SHARE
        assert view[1].figures.given_back == view[2].figures.given_back == 0
        assert proc.failures >= 2
        proc.cured.set()  # the record can be processed now (a dependency back, a fixed processor)
        wait_until(lambda: committed_offsets(zk, "g", topic)[0] == BACKLOG, what="partition 0 again")
    assert_every_record_once(proc, {0: BACKLOG, 1: OTHERS, 2: OTHERS})


class Gated(RecordingProcessor):
    """Partition 0's first batch waits for ``gate``; later batches of partition 0 take ``slow_s``,
    those of the others ``others_s``."""

    def __init__(self, slow_s: float = 0.0, others_s: float = 0.0) -> None:
        super().__init__(self._respond)
        self.gate = threading.Event()
        self.slow_s = slow_s
        self.others_s = others_s
        self._first = True

    def _respond(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if source.partition != 0:
            time.sleep(self.others_s)
        elif source.partition == 0:
            if self._first:
                self._first = False
                self.gate.wait(60)
            elif self.slow_s:
                time.sleep(self.slow_s)
        return BatchResponse.advance()


def test_a_partition_paused_alone_holds_back_no_other_partition(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=3)
    proc = Gated()
    produce(topic, records(0, BACKLOG))
    config = channel_config(zk_connect, kafka_config, [topic], **SETTINGS)
    with InboundChannel.from_dict(config, processor=proc) as channel:
        hog_the_budget(channel, proc)
        channel.pause(topic, 0)
        proc.gate.set()  # the batch in hand finishes; then nothing more of partition 0
        wait_until(lambda: len(delivered_offsets(proc, 0)) == 20, what="the batch in hand")
        others_get_their_records(zk, channel, topic, produce)
        assert len(delivered_offsets(proc, 0)) == 20
        channel.resume(topic, 0)
        wait_until(lambda: committed_offsets(zk, "g", topic)[0] == BACKLOG, what="partition 0 after the resume")
    assert_every_record_once(proc, {0: BACKLOG, 1: OTHERS, 2: OTHERS})


def test_a_partition_halted_by_out_of_range_fail_holds_back_no_other_partition(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    # Partition 0 fills the budget, then its next fetch is out of range (records deleted beyond
    # what it fetched, as retention does to a lagging partition): halted by on_out_of_range:
    # fail with what it fetched before still buffered.
    topic = topic_factory(partitions=3)
    # Partitions 1 and 2 drain at a moderate pace (50 ms a batch), so that the budget is spent
    # while they wait for room: fetched in one poll and processed at once, they would never be
    # short of it, and partition 0 need give nothing back.
    proc = Gated(slow_s=0.2, others_s=0.05)
    first = 700
    produce(topic, records(0, first))
    config = channel_config(zk_connect, kafka_config, [topic], on_out_of_range="fail", **SETTINGS)
    with InboundChannel.from_dict(config, processor=proc) as channel:
        wait_until(lambda: buffered(channel, 0) >= first - 20, what="partition 0 fetched to its log end")
        channel.pause(topic, 0)  # so that its fetch stops at 700 while the log moves on
        produce(topic, records(0, 100, start=first))
        admin = AdminClient(dict(kafka_config))
        for future in admin.delete_records([TopicPartition(topic, 0, first + 50)]).values():
            future.result(timeout=10)
        channel.resume(topic, 0)
        proc.gate.set()  # a few slow batches free room; the next fetch, at 700, is out of range
        wait_until(lambda: any(p.halted for p in channel.partitions()), what="partition 0 halted")
        held = delivered_offsets(proc, 0)
        assert buffered(channel, 0) > SHARE  # halted with what it fetched before still buffered
        others_get_their_records(zk, channel, topic, produce)
        assert delivered_offsets(proc, 0) == held  # halted: nothing processed meanwhile
        channel.reposition(topic, 0, first + 50)  # what `jetkafka offsets reset` does
        wait_until(lambda: committed_offsets(zk, "g", topic)[0] == first + 100, what="partition 0 after the reset")
    assert_every_record_once(proc, {1: OTHERS, 2: OTHERS})
    assert delivered_offsets(proc, 0) == held + list(range(first + 50, first + 100))


def test_a_slow_partition_does_not_set_the_pace_of_the_others(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    # Partition 0 takes 25 ms a batch of 20 (800 events a second); 1 and 2 are fast. With a share
    # of 600, its backlog fills the budget of 1,800: before shares were kept, the others got
    # room only as fast as partition 0 freed it, behind what librdkafka had fetched ahead for
    # it, and finished about when it did. (Its old pause, at four times a share, lay beyond
    # the budget of fewer than four partitions, as it does with the defaults.)
    topic = topic_factory(partitions=3)
    proc = Gated(slow_s=0.025)
    proc.gate.set()
    backlog, share = 6000, 600
    produce(topic, records(0, backlog))
    config = channel_config(zk_connect, kafka_config, [topic], **{**SETTINGS, "buffer_max_events": share})
    with InboundChannel.from_dict(config, processor=proc) as channel:
        wait_until(lambda: buffered(channel, 0) >= 2 * share, what="partition 0 borrowing the budget")
        others_get_their_records(zk, channel, topic, produce, stalled=False)
        left = backlog - committed_offsets(zk, "g", topic)[0]
        assert left > backlog // 2, f"partition 0 had only {left} records left when the fast ones were done"
        wait_until(lambda: committed_offsets(zk, "g", topic)[0] == backlog, timeout=60, what="partition 0's backlog")
    assert_every_record_once(proc, {0: backlog, 1: OTHERS, 2: OTHERS})

"""Pipelined commits: advance() does not wait for ZooKeeper, and nothing it sent goes astray."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from kazoo.client import KazooClient

from jetkafka import (
    BatchEventProcessor,
    BatchResponse,
    EventBatch,
    InboundChannel,
    PartitionSnapshot,
    PartitionSource,
)
from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._commit_pipeline import CommitPipeline
from jetkafka.channel._context import ChannelContext
from jetkafka.channel._partition import PartitionState
from tests.support.channels import make_channel, values, wait_until
from tests.support.group_watch import Sampler, committed, offset_nodes

_ADVANCE = BatchResponse.advance()


class FastAdvance(BatchEventProcessor):
    """Advances every batch at once; counts events; keeps no termination commit of its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.offsets: dict[int, list[int]] = {}
        self.context: ChannelContext | None = None
        self.unlanded: list[tuple[int, int, int | None]] = []  # partition, next offset, committed then

    def on_start(self, context: ChannelContext) -> None:
        self.context = context

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        with self.lock:
            self.offsets.setdefault(source.partition, []).extend(e.offset for e in events)
        return _ADVANCE

    def on_batch_processed(self, source: PartitionSource) -> None:
        assert self.context is not None
        landed = self.context.committed(source.topic, source.partition)
        if landed != source.next_offset:
            with self.lock:
                self.unlanded.append((source.partition, source.next_offset, landed))

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.offsets.values())


def test_commits_coalesce_and_the_last_one_lands(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(2000, 2))
    proc = FastAdvance()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=5) as channel:
        wait_until(lambda: committed(zk, topic) == {0: 1000, 1: 1000}, what="every offset committed")
        wait_until(lambda: all(p.committed == 1000 for p in channel.partitions()), what="the answers applied")
        assert channel.partitions() == [PartitionSnapshot(topic, p, 1000, 1000, 0, False, None) for p in (0, 1)]
    assert {p: sorted(set(o)) == list(range(1000)) for p, o in proc.offsets.items()} == {0: True, 1: True}
    # 200 batches per partition; while one commit travels the next ones wait and merge.
    writes = {p: version for p, (_, version) in offset_nodes(zk, topic).items()}
    assert all(w < 200 for w in writes.values()), writes
    assert proc.unlanded, "every commit had landed before on_batch_processed: nothing was pipelined"


def assert_next_owner_starts_at(
    zk_connect: str, kafka_config: dict[str, Any], topic: str, produce: Any, offset: int
) -> None:
    """A new channel on ``topic`` gets only an event produced now, at ``offset`` of partition 0:
    it re-reads nothing its predecessor processed."""
    second = FastAdvance()
    with make_channel(zk_connect, kafka_config, topic, second):
        produce(topic, [(0, b"k", b"after")])
        wait_until(lambda: second.count() == 1, what="the event produced after the hand-off")
        time.sleep(0.5)
    assert second.offsets == {0: [offset]}, "the next owner re-read events already processed"


def hold_commit_answers(channel: InboundChannel) -> threading.Event:
    """Keep the answers to the channel's commits from being applied until the event is set:
    the next commit stays in flight and later advances wait behind it."""
    gate = threading.Event()
    client = channel._controller.client  # type: ignore[union-attr]
    client.handler.completion_queue.put(lambda: gate.wait(30))
    return gate


def test_graceful_shutdown_commits_what_was_in_flight_or_waiting(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(400, 2))
    first = FastAdvance()
    # Each advance is sent as soon as the commit before it is answered (no interval), so the
    # held answer below is what keeps the later ones waiting.
    channel = make_channel(zk_connect, kafka_config, topic, first, batch_max_events=2, commit_interval_ms=0)
    channel.start()
    wait_until(lambda: committed(zk, topic) == {0: 200, 1: 200}, what="first events committed")
    gate = hold_commit_answers(channel)
    produce(topic, values(4000, 2, start=400))
    wait_until(lambda: first.count() == 4400, what="all events processed")
    # One commit per partition went out and landed; its answer is held up, so nothing followed.
    assert all(offset < 2200 for offset in committed(zk, topic).values())
    stopping = threading.Thread(target=channel.shutdown, kwargs={"timeout": 30})
    stopping.start()
    time.sleep(0.3)
    gate.set()
    stopping.join(30)
    assert not stopping.is_alive()
    # The processor returns None from on_stream_termination: the release still writes the
    # newest advance, after the one in flight was answered.
    assert committed(zk, topic) == {0: 2200, 1: 2200}
    assert_next_owner_starts_at(zk_connect, kafka_config, topic, produce, 2200)


def test_without_pipelining_each_commit_lands_before_the_next_batch(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(400, 2))
    proc = FastAdvance()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=5, pipelined_commits=False):
        wait_until(lambda: committed(zk, topic) == {0: 200, 1: 200}, what="every offset committed")
    assert proc.count() == 400
    assert proc.unlanded == []
    versions = {p: version for p, (_, version) in offset_nodes(zk, topic).items()}
    assert versions == {0: 42, 1: 42}, versions  # take-over, first commit, then one write per batch


def test_reposition_is_not_overwritten_by_a_commit_still_travelling(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(300, 1))
    proc = FastAdvance()
    channel = make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=10)
    channel.start()
    try:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0)], what="partition taken")
        gate = hold_commit_answers(channel)
        produce(topic, values(300, 1, start=300))
        wait_until(lambda: proc.count() >= 600, what="all events processed")
        channel.pause(topic, 0)
        moved = threading.Thread(target=channel.reposition, args=(topic, 0, 100))
        moved.start()
        time.sleep(0.3)
        gate.set()
        moved.join(30)
        assert not moved.is_alive()
        time.sleep(0.5)
        assert committed(zk, topic) == {0: 100}, "a commit sent before the reposition landed after it"
        channel.resume(topic, 0)
        wait_until(lambda: committed(zk, topic) == {0: 600}, what="re-read from 100 and committed")
        assert proc.offsets[0].count(100) == 2 and proc.offsets[0].count(99) == 1
    finally:
        channel.shutdown(timeout=30)


def test_commit_interval_spaces_the_commits_and_the_last_one_lands_when_traffic_stops(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    proc = FastAdvance()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=5, commit_interval_ms=400) as channel:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0)], what="partition taken")
        wait_until(lambda: committed(zk, topic) == {0: 0}, what="the first commit")
        _, before = offset_nodes(zk, topic)[0]
        started = time.monotonic()
        for chunk in range(20):  # 20 events every 100 ms for 2 s: about 80 batches of 5
            produce(topic, values(20, 1, start=20 * chunk))
            time.sleep(0.1)
        # The partition goes quiet with its newest advance waiting: the interval still sends it.
        wait_until(lambda: committed(zk, topic) == {0: 400}, timeout=5, what="the last advance committed")
        elapsed = time.monotonic() - started
        _, after = offset_nodes(zk, topic)[0]
    assert proc.count() == 400
    # One write per 400 ms at most, where one per batch would be about 80; plus the one sent at
    # once after a quiet spell, the end of the burst it started (a backlog after a quiet
    # interval goes at once), and the last one once the traffic stopped.
    assert 2 <= after - before <= elapsed / 0.4 + 3, (after - before, elapsed)


def test_a_graceful_release_commits_the_advance_waiting_for_its_interval(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    first = FastAdvance()
    channel = make_channel(zk_connect, kafka_config, topic, first, batch_max_events=10, commit_interval_ms=60_000)
    channel.start()
    try:
        wait_until(lambda: committed(zk, topic) == {0: 0, 1: 0}, what="first commits")
        produce(topic, values(400, 2))
        # The first advance goes out at once, the next ones wait for the minute to pass, and the
        # one that drains the backlog goes at once again.
        wait_until(lambda: committed(zk, topic) == {0: 200, 1: 200}, what="the backlog committed")
        produce(topic, values(20, 2, start=400))
        wait_until(lambda: first.count() == 420, what="all events processed")
        time.sleep(0.5)
        # Drained again right after a drained commit: this advance waits for the interval.
        assert committed(zk, topic) == {0: 200, 1: 200}
    finally:
        channel.shutdown(timeout=30)
    assert committed(zk, topic) == {0: 210, 1: 210}
    assert_next_owner_starts_at(zk_connect, kafka_config, topic, produce, 210)



def test_the_last_commit_of_a_backlog_lands_at_once_whatever_the_interval(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(300, 1))
    proc = FastAdvance()
    started = time.monotonic()
    # 30 batches, a commit at most every 30 s: the first goes out at once, the ones made while
    # records still wait are held, and the one that drains the partition's log goes at once.
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=10, commit_interval_ms=30_000):
        wait_until(lambda: committed(zk, topic) == {0: 300}, timeout=20, what="the backlog's last offset committed")
        landed_after = time.monotonic() - started
        _, version = offset_nodes(zk, topic)[0]
    assert proc.count() == 300
    assert landed_after < 25, landed_after  # not at the interval's end
    # The take-over's writes, the first advance and the last one: no write per batch.
    assert version <= 4, version


def test_a_trickle_that_drains_the_partition_after_every_record_commits_once_per_interval(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    proc = FastAdvance()
    with make_channel(zk_connect, kafka_config, topic, proc, commit_interval_ms=1000) as channel:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0)], what="partition taken")
        wait_until(lambda: committed(zk, topic) == {0: 0}, what="the first commit")
        _, before = offset_nodes(zk, topic)[0]
        started = time.monotonic()
        for i in range(60):  # one record every 50 ms for 3 s: each batch drains the partition
            produce(topic, values(1, 1, start=i))
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        _, during = offset_nodes(zk, topic)[0]
        wait_until(lambda: committed(zk, topic) == {0: 60}, timeout=10, what="the last record committed")
    assert proc.count() == 60
    # One write per second at most while the records came; one per record would be 60. The
    # margin covers a first commit at once and one early commit where a fetch found a newer
    # record already in the log (the record's advance then counts as made while one waited).
    assert during - before <= elapsed / 1.0 + 2, (during - before, elapsed)


class WatchesLandedCommits(FastAdvance):
    """Notes the landed commit of the partition at every batch, which takes half a millisecond."""

    def __init__(self) -> None:
        super().__init__()
        self.landed: list[int | None] = []

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        assert self.context is not None
        self.landed.append(self.context.committed(source.topic, source.partition))
        time.sleep(0.0005)
        return super().on_next_batch(source, events)


def test_commits_never_go_back_while_advances_cross_the_interval(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(5000, 1))
    proc = WatchesLandedCommits()
    # Batches of one event and a 1 ms interval: advances are held and sent, by the worker and
    # by the timer, every few batches; an advance sent at once must replace a held older one.
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=1, commit_interval_ms=1):
        wait_until(lambda: committed(zk, topic) == {0: 5000}, timeout=60, what="every event committed")
    assert proc.count() == 5000
    landed = [c for c in proc.landed if c is not None]
    assert len(set(landed)) > 20, "too few commits landed while batches ran to show anything"
    backwards = [(a, b) for a, b in itertools.pairwise(landed) if b < a]
    assert backwards == [], f"an older offset landed after a newer one: {backwards[:5]}"


# -- when an advance is sent: drained partitions, against a fake ZooKeeper ---------------------


class HeldAnswers:
    """The offset store: records each asynchronous commit and answers it when told."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self._unanswered: list[tuple[Any, int, Callable[[Exception | None], None]]] = []

    def commit_async(self, lease: Any, offset: int, done: Callable[[Exception | None], None]) -> None:
        self.sent.append(offset)
        self._unanswered.append((lease, offset, done))

    def answer(self) -> None:
        while self._unanswered:
            lease, offset, done = self._unanswered.pop(0)
            lease.committed = offset
            done(None)


def _pipeline(interval_s: float) -> tuple[CommitPipeline, HeldAnswers, PartitionState]:
    store = HeldAnswers()
    pipeline = CommitPipeline(store, lambda key, offset: None, lambda key, cause: None, lambda state: None,  # type: ignore[arg-type]
                              interval_s)
    lease = SimpleNamespace(topic="t", partition=0, key=("t", 0), committed=0)
    state = PartitionState(lease, 0, 100, 1 << 20, BufferBudget(100, 1 << 20))  # type: ignore[arg-type]
    return pipeline, store, state


def test_the_advance_that_drains_a_backlog_is_sent_at_once_not_at_the_intervals_end() -> None:
    pipeline, store, state = _pipeline(interval_s=30)
    try:
        pipeline.submit(state, 10, drained=False)  # the first commit goes out at once
        store.answer()
        pipeline.submit(state, 20, drained=False)  # records still waiting: held for 30 s
        pipeline.submit(state, 30, drained=False)
        assert store.sent == [10]
        pipeline.submit(state, 40, drained=True)  # the backlog's end: at once, replacing 30
        assert store.sent == [10, 40]
        store.answer()
        # The commit before was itself a drained one: the interval holds the next ones again.
        pipeline.submit(state, 50, drained=True)
        pipeline.submit(state, 60, drained=False)
        pipeline.submit(state, 70, drained=True)
        assert store.sent == [10, 40]
    finally:
        pipeline.close()


def test_a_drained_advance_behind_a_commit_in_flight_goes_when_that_one_is_answered() -> None:
    pipeline, store, state = _pipeline(interval_s=30)
    try:
        pipeline.submit(state, 10, drained=False)
        pipeline.submit(state, 20, drained=True)  # waits for the answer to 10, not for 30 s
        assert store.sent == [10]
        store.answer()
        assert store.sent == [10, 20]
        store.answer()
        assert state.committed == 20
    finally:
        pipeline.close()


def test_a_burst_between_two_commits_waits_for_the_interval_and_one_across_two_is_a_backlog() -> None:
    pipeline, store, state = _pipeline(interval_s=30)

    def interval_up() -> None:
        """The interval ends now: the timer sends the advance waiting, then it is 30 s again."""
        sent = len(store.sent)
        pipeline.set_interval(0)
        wait_until(lambda: len(store.sent) == sent + 1, timeout=5, what="the timer's commit")
        pipeline.set_interval(30)
        store.answer()

    try:
        pipeline.submit(state, 10, drained=True)  # a trickle's record: at once, then one per interval
        store.answer()
        pipeline.submit(state, 20, drained=True)
        interval_up()
        # A burst whose first batch went out on the interval rule, the commit before it a
        # drained one: its last advance waits for the interval like any other.
        pipeline.submit(state, 30, drained=False)
        interval_up()
        pipeline.submit(state, 40, drained=True)
        assert store.sent == [10, 20, 30]
        # Records still waiting at the next commit too: a backlog, whose end goes at once.
        pipeline.submit(state, 50, drained=False)
        interval_up()
        pipeline.submit(state, 60, drained=True)
        assert store.sent == [10, 20, 30, 50, 60]
    finally:
        pipeline.close()


def test_a_partition_that_drains_after_every_batch_commits_once_per_interval() -> None:
    pipeline, store, state = _pipeline(interval_s=30)
    try:
        for offset in range(1, 200):  # a trickle: every advance finds the partition drained
            pipeline.submit(state, offset, drained=True)
            store.answer()
        assert store.sent == [1]  # the first at once, the newest waits for the interval
        pipeline.set_interval(0)  # a hot deploy: the waiting one is re-timed and sent
        wait_until(lambda: store.sent == [1, 199], timeout=5, what="the waiting advance sent")
    finally:
        pipeline.close()


class CommitsTheLastBatchItself(FastAdvance):
    """Advances every batch; the batch that ends at ``last`` is also committed by the processor
    itself through its context (one transaction, as a processor writing its own records with
    the offsets does) before it returns ``advance()``."""

    def __init__(self, last: int) -> None:
        super().__init__()
        self.last = last
        self.own_commits = 0

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if source.next_offset == self.last:
            assert self.context is not None
            self.context.commit({(source.topic, source.partition): source.next_offset})
            self.own_commits += 1
        return super().on_next_batch(source, events)


def test_a_processors_own_commit_is_never_followed_by_an_older_pipelined_advance(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    """Three batches or more with a two-second interval: the first advance goes out at once,
    the next ones wait for the interval, and the last batch is committed through the context.
    The advance still waiting is older than that commit: it must not land after it and move
    the committed offset back."""
    topic = topic_factory(partitions=1)
    produce(topic, values(30, 1))
    proc = CommitsTheLastBatchItself(last=30)
    history = Sampler(lambda: committed(zk, topic).get(0), interval=0.02)
    try:
        with make_channel(
            zk_connect, kafka_config, topic, proc, batch_max_events=10, commit_interval_ms=2000
        ) as channel:
            wait_until(lambda: proc.own_commits == 1, what="the processor's own commit")
            time.sleep(2.5)  # the interval is up: an advance still waiting would be sent now
            assert committed(zk, topic) == {0: 30}, "an older advance landed after the processor's own commit"
            assert channel.partitions()[0].committed == 30
    finally:
        history.stop()
    assert proc.count() == 30 and proc.own_commits == 1
    landed = [value for _, value in history.samples if value is not None]
    backwards = [(a, b) for a, b in itertools.pairwise(landed) if b < a]
    assert backwards == [], f"the committed offset went back: {backwards}"


def test_a_commit_outside_the_turns_drops_the_advance_waiting_for_its_interval() -> None:
    pipeline, store, state = _pipeline(interval_s=30)
    try:
        pipeline.submit(state, 10, drained=False)  # at once
        store.answer()
        pipeline.submit(state, 20, drained=False)  # waits for the interval
        pipeline.supersede(state)
        pipeline.settle(state)  # a waiting advance would become the pending commit here
        assert store.sent == [10] and state.commit_pending is None
    finally:
        pipeline.close()

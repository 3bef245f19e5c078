"""Whether workers may start a batch: never while commits are suspended, while the session's
local lease has run out (a process frozen past its session timeout, before kazoo has noticed
anything), or once the session is known lost; each lapse logged once, with its cause.

The end-to-end form (a real SIGSTOP) is ``tests/faults/test_zombie.py``; there the scheduler
decides whether a worker or kazoo's thread runs first after the thaw, so this is where each
cause is shown every time, and where a lapse between a turn's check and the processor's call
(the last check, inside the call's wrapper) is shown to start nothing and lose nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kazoo.client import KazooClient

from jetkafka import BatchResponse, EventBatch, InboundChannel, PartitionSource, ProcessSession, parse_config
from jetkafka.channel._leases import PartitionLeases
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._session_lease import SessionLease
from tests.support.channels import (
    RecordingProcessor,
    channel_config,
    committed_offsets,
    make_channel,
    values,
    wait_until,
)
from tests.support.instances import Instance
from tests.support.lapses import LapseAtTheCall
from tests.support.zk_faults import expire_session


def leases_over(lease: SessionLease) -> PartitionLeases:
    # may_act reads only the channel's controller (its session's lease); the table and the
    # controls are not touched by it.
    channel = SimpleNamespace(_controller=SimpleNamespace(lease=lease))
    return PartitionLeases(cast(Any, channel), cast(Any, None), cast(Any, None))


def test_no_batch_starts_once_the_local_lease_ran_out_until_zookeeper_answers(caplog: pytest.LogCaptureFixture) -> None:
    lease = SessionLease(KazooClient(hosts="127.0.0.1:1"), timeout_s=0.3, margin_s=0.0)  # never started
    leases = leases_over(lease)
    lease.renewed(time.monotonic())
    caplog.set_level(logging.INFO, logger="jetkafka.channel")

    assert leases.may_act()
    time.sleep(0.4)  # as a frozen process would: no answer for longer than the session timeout
    assert not leases.may_act()
    assert not leases.may_act()
    lapsed = [r.getMessage() for r in caplog.records if "starting no batch" in r.getMessage()]
    assert len(lapsed) == 1 and "the session may have expired unnoticed" in lapsed[0], lapsed

    lease.renewed(time.monotonic())  # an answer on the session
    assert leases.may_act()
    assert "ZooKeeper answered again: the local lease runs; starting batches again" in caplog.text


def test_no_batch_starts_once_the_session_is_lost_or_while_commits_are_suspended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = SessionLease(KazooClient(hosts="127.0.0.1:1"), timeout_s=30.0, margin_s=1.0)
    leases = leases_over(lease)
    lease.renewed(time.monotonic())
    caplog.set_level(logging.INFO, logger="jetkafka.channel")

    leases.commits_suspended(True)  # the connection dropped: the session may still live
    assert not leases.may_act()
    leases.commits_suspended(False)
    assert leases.may_act()

    lease.void()  # kazoo reported the session lost
    assert not leases.may_act()
    assert "ZooKeeper session lost: starting no batch until a new session is established" in caplog.text
    lease.renewed(time.monotonic())  # the first answer on the new session
    assert leases.may_act()


class FlakyOnce(RecordingProcessor):
    """Fails the first attempt of every fifth batch (its first offset a multiple of 50)."""

    def __init__(self, lapse: LapseAtTheCall | None = None) -> None:
        super().__init__()
        self.failed: set[int] = set()
        self.lapse = lapse

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        first = events.first_offset
        if first % 50 == 0 and first not in self.failed:
            self.failed.add(first)
            if self.lapse is not None:
                self.lapse.failed_partitions.add(source.partition)
            raise RuntimeError(f"offset {first}: first attempt fails")
        return super().on_next_batch(source, events)


def test_a_lease_lapsing_between_the_turn_and_the_call_starts_nothing_and_loses_nothing(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    # The turn's own check passes; the one right before the processor's call does not. The
    # batch goes back to the buffer (or stays with the retry of a failed one) and is delivered
    # once the lease runs again, in order, nothing lost or repeated.
    topic = topic_factory(partitions=2)
    produce(topic, values(1000, 2))
    processor = FlakyOnce()
    channel = make_channel(
        zk_connect, kafka_config, topic, processor, batch_max_events=10, error_backoff_ms=10, error_backoff_max_ms=20
    )
    lapse = LapseAtTheCall(channel.may_act)
    processor.lapse = lapse
    channel.may_act = lapse  # type: ignore[method-assign]
    with channel:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 500, 1: 500}, what="every event committed")
    assert processor.violations == []
    assert sorted(processor.ids()) == list(range(1000))
    for p in (0, 1):
        offsets = [o for _t, part, o, _v in processor.delivered if part == p]
        assert offsets == list(range(500)), f"partition {p}: delivered out of order or twice"
    assert lapse.refused >= 10 and lapse.refused_redeliveries == len(processor.failed) >= 2, (
        lapse.refused, lapse.refused_redeliveries, sorted(processor.failed)
    )


class SlowLogEnds:
    """The channel's metadata consumer (as its ``wrap_consumer``) whose first look-up of log
    ends on the rebalance thread (a never-committed partition's start offset) waits for
    ``go``: the slow call of a take-over, during which the session can expire."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.go = threading.Event()
        self._consumer: Any = None

    def __call__(self, consumer: Any, role: str) -> Any:
        if role != "metadata":
            return consumer
        self._consumer = consumer
        return self

    def offsets_for_times(self, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "jetkafka-rebalance" and not self.waiting.is_set():
            self.waiting.set()
            self.go.wait(60)
        return self._consumer.offsets_for_times(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def test_a_lease_whose_session_expires_while_it_is_being_started_is_never_processed(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    """A rebalance takes two partitions, one committed and one never committed; the start
    offset look-up of the second is slow, and the session expires meanwhile. The first one's
    lease is dead by the time it would be adopted: nothing in the table yet when the session's
    loss was told, so it must not be adopted at all. Another instance takes both; the first
    instance, whose processor only ever answers get_next() (no commit ever fences it), must
    process nothing of them under the new session."""
    topic = topic_factory(partitions=2)
    OffsetStore(zk, GroupPaths("g")).write_unfenced(topic, 0, 0)  # committed: started without a look-up
    produce(topic, values(40, 2))
    slow = SlowLogEnds()
    stale = RecordingProcessor(lambda source, events: BatchResponse.get_next())
    parsed = parse_config(channel_config(zk_connect, kafka_config, [topic], rebalance_interval_s=3600))
    session = ProcessSession(parsed.zookeeper)
    session.start()
    channel = InboundChannel(parsed, stale, controller=session, wrap_consumer=slow)
    other: Instance | None = None
    try:
        channel.start()
        assert slow.waiting.wait(30), "the start-offset look-up never came"
        # The other instance claims both partitions; it takes them once they are free.
        other = Instance(
            channel_config(zk_connect, kafka_config, [topic], coordinator="static", partitions={topic: [0, 1]})
        )
        expire_session(session.client)
        wait_until(lambda: other.channel.owned_partitions() == [(topic, 0), (topic, 1)], what="taken by the other")
        slow.go.set()
        wait_until(lambda: sorted(other.processor.ids()) == list(range(40)), what="every event at the other")
        wait_until(session.lease.valid, what="the new session's lease")
        time.sleep(1.0)  # time enough for a worker to start a batch on a partition adopted after all
        assert stale.delivered == [], "processed under a lease of the expired session"
        assert channel.owned_partitions() == [], "a lease of the expired session was adopted"
    finally:
        slow.go.set()
        channel.shutdown()
        session.stop()
        if other is not None:
            other.close()
    assert other.processor.violations == [] and stale.violations == []

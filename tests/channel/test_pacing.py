"""Log-end pacing: a caught-up partition is fetched again after a rest, not in a loop of empty
fetches; what is produced meanwhile arrives, each record once and in order; a rest never
resumes a partition paused for another reason."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._buffer import PartitionBuffer
from jetkafka.channel._fetcher import Fetcher
from jetkafka.channel._pacing import LogEndPacing, may_resume
from jetkafka.channel._partition import PartitionState
from jetkafka.coordination._ownership import PartitionOwnership
from tests.channel.test_fetcher import buffered_offsets, wait_buffered
from tests.support.channels import values
from tests.support.coordination import PATHS, two_clients

# -- the rest schedule (no servers) ------------------------------------------------------------


def test_rests_end_on_a_common_grid_between_half_and_one_and_a_half_intervals() -> None:
    pacing = LogEndPacing(100)
    state: Any = object()
    for now in (10.00, 10.04, 10.051, 10.099):
        pacing = LogEndPacing(100)
        assert pacing.rest(("t", 0), state, now)
        due = pacing.next_due
        assert 0.05 <= due - now <= 0.15 + 1e-9
        assert abs(due / 0.1 - round(due / 0.1)) < 1e-6  # on the grid
    pacing = LogEndPacing(100)
    pacing.rest(("t", 0), state, 10.01)
    pacing.rest(("t", 1), state, 10.03)
    assert pacing.due(10.0999) == []
    assert sorted(key for key, _ in pacing.due(10.1 + 1e-9)) == [("t", 0), ("t", 1)]  # one fetch for both


def test_a_partition_already_resting_or_with_pacing_off_does_not_rest_again() -> None:
    state: Any = object()
    pacing = LogEndPacing(100)
    assert pacing.rest(("t", 0), state, 1.0)
    assert not pacing.rest(("t", 0), state, 1.01)
    assert pacing.rests == 1
    off = LogEndPacing(0)
    assert not off.enabled and not off.rest(("t", 0), state, 1.0)


def test_a_forgotten_rest_does_not_end() -> None:
    state: Any = object()
    pacing = LogEndPacing(100)
    pacing.rest(("t", 0), state, 1.0)
    pacing.rest(("t", 1), state, 1.0)
    pacing.forget(("t", 0))
    assert [key for key, _ in pacing.due(5.0)] == [("t", 1)]
    assert pacing.due(6.0) == [] and pacing.next_due == float("inf")


def test_only_a_partition_paused_for_no_other_reason_may_resume() -> None:
    budget = BufferBudget(100, 1 << 20)

    class Flags:
        """What may_resume reads of a PartitionState."""

        def __init__(self, paused: bool = False, halted: str | None = None) -> None:
            self.paused, self.halted = paused, halted
            self.buffer = PartitionBuffer(0, 100, 1 << 20, budget)

    assert may_resume(Flags())  # type: ignore[arg-type]
    assert not may_resume(Flags(paused=True))  # type: ignore[arg-type]
    assert not may_resume(Flags(halted="out of range"))  # type: ignore[arg-type]
    held = Flags()
    held.buffer.fetch_paused = True  # holding its share of the budget
    assert not may_resume(held)  # type: ignore[arg-type]
    seeking = Flags()
    seeking.buffer.await_seek()
    assert not may_resume(seeking)  # type: ignore[arg-type]
    gone = Flags()
    gone.buffer.close()
    assert not may_resume(gone)  # type: ignore[arg-type]


# -- against the broker ------------------------------------------------------------------------


class FetchRequests:
    """librdkafka's count of Fetch requests, from its statistics (every 100 ms)."""

    def __init__(self) -> None:
        self._by_client: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        sent = sum(b.get("req", {}).get("Fetch", 0) for b in stats.get("brokers", {}).values())
        with self._lock:
            self._by_client[stats["name"]] = sent

    def total(self) -> int:
        with self._lock:
            return sum(self._by_client.values())


@contextmanager
def paced_fetcher(
    zk_connect: str, kafka_config: dict[str, Any], topic: str, partitions: int, pace_ms: int, requests: FetchRequests
) -> Iterator[tuple[Fetcher, dict[int, PartitionState]]]:
    """A started fetcher owning every partition of ``topic`` from offset 0."""
    budget = BufferBudget(10_000, 1 << 24)
    states: dict[tuple[str, int], PartitionState] = {}
    conf = {**kafka_config, "statistics.interval.ms": 100, "stats_cb": requests}
    fetcher = Fetcher(conf, "g", states.get, lambda state: None, budget, log_end_pace_ms=pace_ms)
    try:
        with two_clients(zk_connect) as (client, _):
            fetcher.partition_counts((topic,))  # as the channel does: leaders become known
            own = PartitionOwnership(client, PATHS, "a")
            own.prepare(topic)
            for lease in own.take_many(topic, list(range(partitions))):
                state = PartitionState(lease, 0, 10_000, 1 << 24, budget)
                state.buffer.await_seek()
                states[lease.key] = state
            fetcher.assign((s, 0) for s in states.values())
            fetcher.start()
            yield fetcher, {p: states[(topic, p)] for p in range(partitions)}
    finally:
        fetcher.stop()


def fetches_in(requests: FetchRequests, seconds: float) -> int:
    time.sleep(0.3)  # a statistics report to start from
    before = requests.total()
    time.sleep(seconds)
    return requests.total() - before


def test_a_caught_up_partition_is_fetched_again_after_a_rest_not_in_a_loop(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=4)
    produce(topic, values(40, 4))
    requests = FetchRequests()
    with paced_fetcher(zk_connect, kafka_config, topic, 4, 100, requests) as (fetcher, states):
        wait_buffered(states, {p: list(range(10)) for p in range(4)})
        sent = fetches_in(requests, 2.0)
        # Four partitions resting 100 ms on one grid: one fetch request per tick, plus the one
        # that reports the end (about 40 in 2 s, more on a loaded machine); unpaced, a broker
        # that answers at once is asked thousands of times a second.
        assert 0 < sent <= 1000, sent
        assert fetcher.pacing.rests >= 8


def test_records_produced_while_partitions_rest_arrive_each_once_in_order(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=3)
    requests = FetchRequests()
    with paced_fetcher(zk_connect, kafka_config, topic, 3, 50, requests) as (fetcher, states):
        sent = 0
        for burst in range(12):  # bursts spread over the rests of the three partitions
            produce(topic, values(3 * (burst + 1), 3))
            sent += burst + 1
            time.sleep(0.037 * (burst % 4))
        wait_buffered(states, {p: list(range(sent)) for p in range(3)})
        assert fetcher.pacing.rests > 0
        time.sleep(0.3)  # nothing more arrives later
        assert {p: buffered_offsets(s) for p, s in states.items()} == {p: list(range(sent)) for p in range(3)}
        # Counted before the buffer drops a re-delivered offset: librdkafka fetched each once.
        assert fetcher.events_fetched == 3 * sent


def test_a_rest_never_resumes_a_partition_the_user_paused(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(4, 2))
    requests = FetchRequests()
    with paced_fetcher(zk_connect, kafka_config, topic, 2, 50, requests) as (fetcher, states):
        wait_buffered(states, {0: [0, 1], 1: [0, 1]})
        rests = fetcher.pacing.rests
        deadline = time.monotonic() + 10
        while not fetcher.pacing.resting(states[0].key):  # paused while it rests
            assert time.monotonic() < deadline
            time.sleep(0.005)
        states[0].paused = True
        fetcher.pause(states[0])
        produce(topic, values(4, 2))  # offsets 2, 3 in both
        wait_buffered(states, {0: [0, 1], 1: [0, 1, 2, 3]})
        time.sleep(0.5)  # ten rest intervals
        assert fetcher.pacing.rests > rests
        assert buffered_offsets(states[0]) == [0, 1]
        states[0].paused = False
        fetcher.resume(states[0])
        wait_buffered(states, {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]})


def test_with_pacing_off_no_partition_rests(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(3, 1))
    requests = FetchRequests()
    with paced_fetcher(zk_connect, kafka_config, topic, 1, 0, requests) as (fetcher, states):
        wait_buffered(states, {0: [0, 1, 2]})
        time.sleep(0.3)
        assert fetcher.pacing.rests == 0
        produce(topic, values(1, 1))
        wait_buffered(states, {0: [0, 1, 2, 3]})


# -- the fetcher's rests with a stand-in consumer (no servers) ---------------------------------


class StandIn:
    """Stands for the fetching consumer: notes pause, resume and seek."""

    def __init__(self, fail_resume: int = 0) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail_resume = fail_resume

    def pause(self, partitions: list[Any]) -> None:
        self.calls.append(("pause", sorted(tp.partition for tp in partitions)))

    def resume(self, partitions: list[Any]) -> None:
        if self.fail_resume:
            self.fail_resume -= 1
            from confluent_kafka import KafkaError, KafkaException

            raise KafkaException(KafkaError(KafkaError._STATE, "resume refused"))
        self.calls.append(("resume", sorted(tp.partition for tp in partitions)))

    def seek(self, tp: Any) -> None:
        self.calls.append(("seek", (tp.partition, tp.offset)))

    def close(self) -> None:
        pass


class Lease:
    def __init__(self, partition: int) -> None:
        self.key = ("t", partition)
        self.topic, self.partition = "t", partition


@contextmanager
def resting_fetcher(partitions: int, fail_resume: int = 0) -> Iterator[tuple[Fetcher, StandIn, dict[int, Any]]]:
    """A fetcher (its thread not started) owning ``partitions`` of topic t, each fetched to offset 7."""
    budget = BufferBudget(100, 1 << 20)
    stand_in = StandIn(fail_resume)
    states: dict[tuple[str, int], Any] = {}
    fetcher = Fetcher(
        {"bootstrap.servers": "127.0.0.1:9"},
        "g",
        states.get,
        lambda state: None,
        budget,
        wrap_consumer=lambda consumer, role: stand_in if role == "fetch" else consumer,
        log_end_pace_ms=10,
    )
    for p in range(partitions):
        state = PartitionState(Lease(p), 7, 100, 1 << 20, budget)  # type: ignore[arg-type]
        states[("t", p)] = state
        fetcher._assigned.add(("t", p))
    try:
        yield fetcher, stand_in, {p: states[("t", p)] for p in range(partitions)}
    finally:
        fetcher.metadata.close()


def end_rests(fetcher: Fetcher) -> None:
    time.sleep(0.02)  # beyond the grid tick of a 10 ms rest
    fetcher._end_rests()


def test_an_ended_rest_resumes_its_partitions_in_one_call_and_wakes_each_leader_once() -> None:
    with resting_fetcher(4) as (fetcher, stand_in, _):
        fetcher.metadata.leaders = {("t", 0): 1, ("t", 1): 1, ("t", 2): 2}  # t[3]: leader unknown
        for p in range(4):
            fetcher._log_end_reached(("t", p))
        assert stand_in.calls == [("pause", [p]) for p in range(4)]
        stand_in.calls.clear()
        end_rests(fetcher)
        # Where each stopped: the buffer's next offset, 7.
        assert stand_in.calls == [("resume", [0, 1, 2, 3]), ("seek", (0, 7)), ("seek", (2, 7)), ("seek", (3, 7))]


def test_an_ended_rest_leaves_a_partition_paused_for_another_reason_paused() -> None:
    with resting_fetcher(6) as (fetcher, stand_in, states):
        for p in range(6):
            fetcher._log_end_reached(("t", p))
        states[0].paused = True  # by the user
        states[1].halted = "out of range"
        states[2].buffer.fetch_paused = True  # holding its share
        states[3].buffer.await_seek()
        states[4].buffer.close()
        fetcher._assigned.discard(("t", 5))  # unassigned meanwhile
        stand_in.calls.clear()
        end_rests(fetcher)
        assert stand_in.calls == []
        assert fetcher.pacing.next_due == float("inf")  # and no rest left to end later


def test_a_rest_belongs_to_one_lease_of_its_partition() -> None:
    with resting_fetcher(1) as (fetcher, stand_in, states):
        fetcher._log_end_reached(("t", 0))
        taken_again = PartitionState(Lease(0), 3, 100, 1 << 20, states[0].buffer.budget)  # type: ignore[arg-type]
        fetcher._states = {("t", 0): taken_again}.get
        stand_in.calls.clear()
        end_rests(fetcher)
        assert stand_in.calls == []  # the new lease's assignment sets its own pause or resume


def test_a_resume_that_failed_is_tried_again_at_the_next_tick() -> None:
    with resting_fetcher(2, fail_resume=1) as (fetcher, stand_in, _):
        for p in range(2):
            fetcher._log_end_reached(("t", p))
        stand_in.calls.clear()
        end_rests(fetcher)
        assert stand_in.calls == []
        end_rests(fetcher)
        assert stand_in.calls[0] == ("resume", [0, 1])


def test_the_wake_up_seek_goes_to_a_partition_past_offset_0() -> None:
    # librdkafka takes a seek to 0 of a fetching partition as no change and wakes nothing.
    with resting_fetcher(2) as (fetcher, stand_in, states):
        fetcher.metadata.leaders = {("t", 0): 1, ("t", 1): 1}
        states[0].buffer.fetch_next = 0  # never written to
        for p in range(2):
            fetcher._log_end_reached(("t", p))
        stand_in.calls.clear()
        end_rests(fetcher)
        assert stand_in.calls == [("resume", [0, 1]), ("seek", (1, 7))]


def test_a_resume_command_wakes_the_fetch_but_not_of_a_halted_partition() -> None:
    from jetkafka.channel._fetch_commands import FetchCommand

    with resting_fetcher(2) as (fetcher, stand_in, states):
        states[1].halted = "out of range"
        fetcher._apply(FetchCommand("resume", ("t", 0), states[0]))
        fetcher._apply(FetchCommand("resume", ("t", 1), states[1]))
        assert stand_in.calls == [("resume", [0]), ("seek", (0, 7)), ("resume", [1])]

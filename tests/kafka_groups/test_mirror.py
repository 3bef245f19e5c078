"""OffsetMirror's bookkeeping: batching per interval, flush before unassign, figures, failures
(no servers: a clock the test moves)."""

from __future__ import annotations

import pytest

from jetkafka.kafka_groups._mirror import RETRY_S, OffsetMirror

A = ("t", 0)
B = ("t", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def step(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def mirror(clock: Clock) -> OffsetMirror:
    return OffsetMirror(0.1, clock=clock)


def test_the_first_offer_goes_at_once_and_offers_within_the_interval_merge_into_one_send_of_the_newest(
    mirror: OffsetMirror, clock: Clock
) -> None:
    mirror.offer(A, 10)
    assert mirror.due(clock.now) == {A: 10}
    mirror.confirmed({A: 10})
    for offset in range(11, 60):
        mirror.offer(A, offset)
        clock.step(0.001)
        assert mirror.due(clock.now) == {}  # 49 offers within 0.1 s: nothing sent meanwhile
    assert mirror.next_due() == pytest.approx(1000.1)
    clock.now = 1000.1
    assert mirror.due(clock.now) == {A: 59}  # one send, of the newest
    assert mirror.due(clock.now) == {}  # taken: not sent twice
    assert mirror.next_due() is None


def test_an_offer_after_a_quiet_interval_goes_at_once_and_partitions_are_timed_apart(
    mirror: OffsetMirror, clock: Clock
) -> None:
    mirror.offer(A, 1)
    assert mirror.due(clock.now) == {A: 1}
    clock.step(0.05)
    mirror.offer(B, 7)  # B never sent: at once, though A's interval is not up
    mirror.offer(A, 2)
    assert mirror.due(clock.now) == {B: 7}
    mirror.confirmed({A: 1, B: 7})
    clock.step(0.5)
    mirror.offer(B, 8)
    assert mirror.due(clock.now) == {A: 2, B: 8}  # both due: one request carries both
    mirror.confirmed({A: 2, B: 8})
    clock.step(1.0)
    mirror.offer(A, 3)
    assert mirror.due(clock.now) == {A: 3}  # quiet for longer than the interval: at once


def test_flush_before_unassign_sends_the_pending_offset_whatever_the_interval(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 5)
    assert mirror.due(clock.now) == {A: 5}
    mirror.offer(A, 6)
    assert mirror.due(clock.now) == {}
    assert mirror.flush(A, clock.now) == 6
    assert mirror.flush(A, clock.now) is None  # nothing pending any more
    assert mirror.flush(B, clock.now) is None  # never offered
    mirror.forget(A)
    assert A in mirror.snapshot().partitions  # kept until its sends are answered
    mirror.confirmed({A: 5})
    mirror.confirmed({A: 6})
    assert A not in mirror.snapshot().partitions


def test_a_released_partitions_failed_send_is_not_retried(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 5)
    assert mirror.flush(A, clock.now) == 5
    mirror.forget(A)
    mirror.failed({A: 5}, "UNKNOWN_MEMBER_ID")
    clock.step(RETRY_S + 1)
    assert mirror.due(clock.now) == {}  # the next owner mirrors its own: a retry could move Kafka back
    assert mirror.snapshot().partitions == {}


def test_an_offer_made_after_the_flush_keeps_a_partition_that_is_forgotten(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 5)
    assert mirror.flush(A, clock.now) == 5
    mirror.offer(A, 9)  # taken again meanwhile: a new lease's commit
    mirror.forget(A)
    mirror.confirmed({A: 5})
    clock.step(0.2)
    assert mirror.due(clock.now) == {A: 9}


def test_a_lower_offer_after_a_higher_one_is_mirrored_as_it_landed(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 100)
    assert mirror.due(clock.now) == {A: 100}
    mirror.confirmed({A: 100})
    clock.step(0.01)
    mirror.offer(A, 40)  # a reset moved the partition back: Kafka must end at 40, not keep 100
    assert mirror.snapshot().partitions[A].behind_offsets == -60
    clock.step(0.1)
    assert mirror.due(clock.now) == {A: 40}
    mirror.offer(A, 41)
    mirror.offer(A, 30)
    mirror.confirmed({A: 40})
    clock.step(0.1)
    assert mirror.due(clock.now) == {A: 30}  # the newest in landing order, not the highest
    mirror.confirmed({A: 30})
    figures = mirror.snapshot().partitions[A]
    assert (figures.confirmed, figures.behind_offsets, figures.trail_seconds) == (30, 0, 0.0)


def test_trail_seconds_and_behind_offsets(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 10)
    assert mirror.due(clock.now) == {A: 10}
    clock.step(2.0)
    first = mirror.snapshot().partitions[A]
    assert first.trail_seconds == pytest.approx(2.0)  # sent, not confirmed yet
    assert first.behind_offsets is None  # Kafka confirmed nothing yet: unknown
    mirror.confirmed({A: 10})
    caught_up = mirror.snapshot().partitions[A]
    assert (caught_up.trail_seconds, caught_up.behind_offsets) == (0.0, 0)
    mirror.offer(A, 25)
    clock.step(0.5)
    mirror.offer(A, 30)
    clock.step(0.5)
    behind = mirror.snapshot().partitions[A]
    assert behind.trail_seconds == pytest.approx(1.0)  # from the oldest offer not confirmed (25)
    assert behind.behind_offsets == 20
    assert mirror.due(clock.now) == {A: 30}
    mirror.confirmed({A: 30})
    assert mirror.snapshot().partitions[A].trail_seconds == 0.0
    # A held partition with no offer yet: no trail.
    assert mirror.snapshot([B]).partitions[B].trail_seconds == 0.0


def test_requests_and_partitions_sent_are_counted(mirror: OffsetMirror) -> None:
    mirror.requests_sent(3)
    mirror.requests_sent(1)
    snapshot = mirror.snapshot()
    assert (snapshot.commits_sent, snapshot.partitions_sent) == (2, 4)


def test_a_failed_send_is_retried_after_the_retry_delay_unless_a_newer_one_covers_it(
    mirror: OffsetMirror, clock: Clock
) -> None:
    mirror.offer(A, 10)
    mirror.offer(B, 20)
    assert mirror.due(clock.now) == {A: 10, B: 20}
    clock.step(0.2)
    mirror.offer(B, 21)  # B has a newer offer waiting
    assert mirror.failed({A: 10, B: 20}, "GROUP_AUTHORIZATION_FAILED")
    clock.step(0.2)
    assert mirror.due(clock.now) == {}  # not before the retry delay
    clock.step(RETRY_S)
    assert mirror.due(clock.now) == {A: 10, B: 21}  # A again; B's newer offer covers 20
    # The trail of B counts from the failed offer's time, not the newer one's.
    assert mirror.snapshot().partitions[B].trail_seconds == pytest.approx(0.4 + RETRY_S)
    assert mirror.snapshot().failures == {"GROUP_AUTHORIZATION_FAILED": 1}


def test_a_failure_covered_by_a_newer_send_in_flight_is_not_sent_again(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 10)
    assert mirror.due(clock.now) == {A: 10}
    clock.step(0.2)
    mirror.offer(A, 11)
    assert mirror.flush(A, clock.now) == 11  # a release's flush does not wait for the answer
    mirror.failed({A: 10}, "_TIMED_OUT")
    clock.step(RETRY_S + 1)
    assert mirror.due(clock.now) == {}
    assert mirror.snapshot().partitions[A].trail_seconds == pytest.approx(RETRY_S + 1.2)  # from offer 10
    mirror.confirmed({A: 11})
    assert mirror.snapshot().partitions[A].trail_seconds == 0.0


def test_each_reason_is_reported_new_once_until_it_succeeded_and_came_back(mirror: OffsetMirror, clock: Clock) -> None:
    news = []
    for offset in range(5):
        mirror.offer(A, offset)
        mirror.offer(B, offset)
        clock.step(RETRY_S + 0.1)
        sent = mirror.due(clock.now)
        news.append(mirror.failed(sent, "UNKNOWN_MEMBER_ID"))
    assert news == [True, False, False, False, False]
    assert mirror.failed({}, "_TIMED_OUT")  # another reason: new
    assert mirror.snapshot().failures == {"UNKNOWN_MEMBER_ID": 5, "_TIMED_OUT": 1}
    clock.step(RETRY_S + 0.1)
    assert mirror.due(clock.now) == {A: 4, B: 4}
    assert mirror.confirmed({A: 4}) == 0  # B still fails with the reason: the run is not over
    assert mirror.confirmed({B: 4}) == 6  # every failing reason succeeded: the run of 6 failures ended
    mirror.offer(A, 5)
    clock.step(1)
    assert mirror.failed(mirror.due(clock.now), "UNKNOWN_MEMBER_ID")  # came back: new again


def test_an_answer_for_an_offset_not_in_flight_is_ignored(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 3)
    assert mirror.due(clock.now) == {A: 3}
    mirror.confirmed({A: 99})
    assert mirror.snapshot().partitions[A].confirmed is None
    mirror.forget_all(lambda key: True)
    mirror.confirmed({A: 3})
    assert mirror.snapshot().partitions == {}


def test_set_interval_applies_to_the_next_send(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 1)
    assert mirror.due(clock.now) == {A: 1}
    mirror.confirmed({A: 1})
    mirror.offer(A, 2)
    mirror.set_interval(1.0)
    clock.step(0.5)
    assert mirror.due(clock.now) == {}
    clock.step(0.5)
    assert mirror.due(clock.now) == {A: 2}


def test_one_request_in_flight_per_partition(mirror: OffsetMirror, clock: Clock) -> None:
    """A newer copy waits for the answer to the one before: a request sent again by librdkafka
    after a dropped connection must not land after it."""
    mirror.offer(A, 10)
    mirror.offer(B, 1)
    assert mirror.due(clock.now) == {A: 10, B: 1}
    mirror.offer(A, 11)
    mirror.offer(B, 2)
    clock.step(5.0)
    assert mirror.due(clock.now) == {}  # both still unanswered
    mirror.confirmed({B: 1})
    assert mirror.next_due() == pytest.approx(clock.now - 4.9)  # B is due at once again
    assert mirror.due(clock.now) == {B: 2}
    mirror.failed({A: 10}, "_TIMED_OUT")  # an answer all the same: A's newest goes after the delay
    clock.step(RETRY_S)
    assert mirror.due(clock.now) == {A: 11}


def test_the_stop_keeps_only_the_offers_of_partitions_still_held(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 10)
    mirror.offer(B, 20)
    assert mirror.due(clock.now) == {A: 10, B: 20}
    mirror.offer(A, 11)  # A is held over by a resubscribe; B was lost
    mirror.offer(B, 21)
    mirror.forget_all(lambda key: key == A)
    assert mirror.pending() == {A: 11}
    assert mirror.due(clock.now) == {A: 11}  # the next start's fetcher sends it at once


def test_a_new_lease_replaces_an_offer_an_earlier_lease_left_unsent(mirror: OffsetMirror, clock: Clock) -> None:
    mirror.offer(A, 50)
    assert mirror.due(clock.now) == {A: 50}
    mirror.confirmed({A: 50})
    mirror.offer(A, 60)  # landed, not sent: then the partition is lost, another owner goes to 90
    assert mirror.due(clock.now, holds=lambda key: False) == {}
    mirror.adopt(A, 90)  # taken back here at ZooKeeper's 90
    clock.step(0.2)
    assert mirror.due(clock.now) == {A: 90}  # never 60 after the other owner's copies


def test_an_offer_not_held_is_looked_at_again_later_not_in_a_loop(clock: Clock) -> None:
    mirror = OffsetMirror(0.0, clock=clock)  # commit_interval_ms 0
    mirror.offer(A, 5)
    assert mirror.due(clock.now, holds=lambda key: False) == {}
    next_due = mirror.next_due()
    assert next_due is not None and next_due >= clock.now + 0.1

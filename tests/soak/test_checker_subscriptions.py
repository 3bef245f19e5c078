"""The soak checker on the events of a folder of channel files (the row of subscriptions).

The run's file removed from a member's folder is a graceful leave of its channel, put back a
join, both on the process's one ZooKeeper session, which stays open: neither excuses anything.
A neighbour's file added, broken or removed must not move the run's group or hold its records
back (:mod:`tests.soak.neighbours`).
"""

from __future__ import annotations

from tests.soak.neighbours import SETTLE_S, WAIT_S
from tests.soak.world import A, B, only, two_members


def test_a_removed_file_whose_channel_hands_over_uncommitted_events_is_a_violation() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 5, 102.1)  # the release did not commit the newest advance
    w.fault("subscription_remove", 102.5, 103.0, [1])
    w.release(A, 0, 102.9)  # the process's session stays open: only the channel left
    w.take(B, 0, 5, 103.1)
    w.deliver(2, 103.2, 0, range(5, 10))
    report = w.check()
    assert only(report.duplicated) == {
        ("subscription_remove", "handed over without committing what was delivered", False): 5
    }
    assert report.violations == 5 and report.expired_sessions == []


def test_a_file_removed_and_put_back_on_one_session_is_clean() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.fault("subscription_remove", 102.5, 103.0, [1])
    w.release(A, 0, 102.9)
    w.take(B, 0, 10, 103.1)
    w.deliver(2, 103.2, 0, range(10, 20))
    w.commit(B, 0, 20, 103.3)
    w.release(B, 0, 104.9)
    w.fault("subscription_add", 104.5, 105.0, [1])
    w.take(A, 0, 20, 105.0)  # the same session takes it again
    w.deliver(1, 105.2, 0, range(20, 30))
    w.commit(A, 0, 30, 105.3)
    report = w.check()
    assert report.violations == 0 and report.duplicated == {} and report.lost == {}


def test_a_file_put_back_whose_channel_reads_below_the_committed_offset_is_a_violation() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.fault("subscription_remove", 102.5, 103.0, [1])
    w.release(A, 0, 102.9)
    w.take(B, 0, 10, 103.1)
    w.release(B, 0, 104.9)
    w.fault("subscription_add", 104.5, 105.0, [1, 2])
    w.take(A, 0, 10, 105.0)
    w.deliver(1, 105.2, 0, range(5, 10))
    report = w.check()
    assert only(report.duplicated) == {("subscription_add", "re-read below the committed offset", False): 5}


def test_the_groups_partition_moving_in_a_neighbour_events_window_disturbs_it() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.fault("neighbour_add", 103.0, 103.4, [1], member="m1")
    w.release(A, 0, 103.4 + SETTLE_S - 0.1)
    w.take(B, 0, 10, 103.4 + SETTLE_S + 0.2)  # after the window: only the release is in it
    w.deliver(2, 105.0, 0, range(10, 20))
    report = w.check()
    assert report.disturbed.count == 1 and report.violations == 1
    assert "neighbour_add in m1's folder" in report.disturbed.examples[0] and "given up" in report.disturbed.examples[0]


def test_a_move_before_a_neighbour_event_is_not_its_disturbance() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.release(A, 0, 102.8)
    w.take(B, 0, 10, 102.9)
    w.fault("neighbour_remove", 103.0, 103.4, [1])
    w.deliver(2, 105.0, 0, range(10, 20))
    assert w.check().disturbed.count == 0


def test_a_record_waiting_past_the_bound_in_a_neighbour_events_window_disturbs_the_group() -> None:
    for waited, disturbed in ((WAIT_S - 0.1, 0), (WAIT_S + 0.1, 1)):
        w = two_members()
        w.fault("neighbour_break", 103.0, 103.4, [1])
        w.produce(0, range(10), at=103.2)
        w.deliver(1, 103.2 + waited, 0, range(10))
        w.commit(A, 0, 10, 103.3 + waited)
        report = w.check()
        assert report.disturbed.count == disturbed, waited
        assert any("neighbour_break" in n and f"{waited:.2f} s" in n for n in report.notes)

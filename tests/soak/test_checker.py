"""The soak checker on synthetic histories: each test plants one outcome and checks its verdict.

Histories are built by hand: deliveries as the event log would hold them, the producer's
acknowledgements, the executed faults, and ZooKeeper transactions (sessions, take-overs,
commits, expiries) replayed by :mod:`tests.soak.fencing` exactly as a real log is. Each test
proves that the checker catches one kind of violation, or attributes one kind of allowed
duplicate or loss to the fault that allows it, and counts nothing else.
"""

from __future__ import annotations

from tests.soak.history import Callback, Delivery
from tests.soak.report import format_table
from tests.soak.world import TOPIC, A, B, only, two_members


def test_a_clean_history_has_no_finding() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.deliver(1, 103.0, 0, range(10, 20))
    w.commit(A, 0, 20, 103.1)
    report = w.check()
    assert report.violations == 0 and report.lost == {} and report.duplicated == {}
    assert report.events["acknowledged"] == report.events["delivered_acknowledged"] == 20
    assert "OK" in format_table(report)


def test_an_acknowledged_event_never_delivered_is_lost() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.produce(0, range(10, 12))  # skipped: committed past below
    w.deliver(1, 103.0, 0, range(12, 20))
    w.commit(A, 0, 20, 103.1)
    w.produce(0, range(20, 25))  # never reached
    report = w.check()
    assert only(report.lost) == {
        ("unattributed", "skipped: the group committed past it", False): 2,
        ("unattributed", "stalled: the partition never got this far", False): 5,
    }
    assert report.violations == 7


def test_a_stalled_partition_is_attributed_to_the_last_fault_on_its_owner() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.fault("deploy_resubscribe", 103.0, 103.5, [1])
    w.fault("reset_offset", 104.0, 104.5, [1, 2], [3], id="elsewhere")  # another partition's reset
    w.produce(0, range(10, 15))
    report = w.check()
    assert only(report.lost) == {("deploy_resubscribe", "stalled: the partition never got this far", False): 5}


def test_records_deleted_unread_by_an_out_of_range_fault_are_allowed_losses() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.produce(0, range(10, 50))
    w.fault("out_of_range", 104.0, 110.0, [1], [0], committed=10, deleted_below=50)
    w.commit(A, 0, 50, 110.5)  # out of range: continue at the new low watermark
    w.produce(0, range(5, 10))  # ...but records below the committed offset were read already
    w.deliveries = [d for d in w.deliveries if d.offset not in range(5, 10)]
    report = w.check()
    assert only(report.lost) == {
        ("out_of_range", "deleted from the broker before anyone read it", True): 40,
        ("unattributed", "skipped: the group committed past it", False): 5,
    }


def test_a_killed_instances_uncommitted_batch_is_an_allowed_duplicate() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.deliver(1, 103.0, 0, range(10, 20))  # in hand, never committed
    w.fault("kill", 103.5, 103.5, [1])
    w.expire(A, 113.5)
    w.take(B, 0, 10, 113.6)
    w.deliver(2, 114.0, 0, range(10, 20))
    w.commit(B, 0, 20, 114.1)
    report = w.check()
    assert only(report.duplicated) == {("kill", "uncommitted batches of an expired session", True): 10}
    assert report.violations == 0
    assert len(report.expired_sessions) == 1 and "kill" in report.expired_sessions[0]


def test_a_killed_instances_committed_events_read_again_are_a_violation() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.fault("kill", 103.5, 103.5, [1])
    w.expire(A, 113.5)
    w.take(B, 0, 10, 113.6)
    w.deliver(2, 114.0, 0, range(5, 10))  # the new owner read from below the last commit
    report = w.check()
    assert only(report.duplicated) == {("kill", "re-read below the offset committed before the expiry", False): 5}
    assert report.offsets_back.count == 0


def test_an_offset_lowered_outside_a_reset_explains_the_re_reads_and_is_a_violation() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.fault("broker_restart", 103.0, 105.0, [1, 2])
    w.commit(A, 0, 0, 105.5)  # e.g. an out-of-range answer handled by going back to offset 0
    w.deliver(1, 106.0, 0, range(10))
    report = w.check()
    assert only(report.duplicated) == {
        ("broker_restart", "re-read after the committed offset went back outside any reset", False): 10
    }
    assert report.offsets_back.count == 1 and report.out_of_order.count == 1


def test_the_same_duplicates_in_a_spark_run_are_violations() -> None:
    w = two_members()
    w.deliver(1, 103.0, 0, range(10))
    w.fault("kill", 103.5, 103.5, [1])
    w.expire(A, 113.5)
    w.take(B, 0, 0, 113.6)
    w.deliver(2, 114.0, 0, range(10))
    report = w.check(mode="spark")
    assert only(report.duplicated) == {("kill", "re-delivered after a session expiry", False): 10}


def test_a_zombie_batch_started_after_its_session_expired_is_a_violation() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))  # in hand at SIGSTOP: allowed
    w.fault("zombie", 102.5, 115.0, [1])
    w.expire(A, 112.5)
    w.take(B, 0, 0, 112.6)
    w.deliver(2, 113.0, 0, range(10))
    w.deliver(1, 117.2, 0, range(10, 15))  # long after SIGCONT, before it noticed
    w.deliver(2, 117.5, 0, range(10, 15))
    report = w.check()
    assert only(report.duplicated) == {
        ("zombie", "uncommitted batches of an expired session", True): 10,
        ("zombie", "batch started after the instance's session had expired", False): 5,
    }


def test_the_batch_a_worker_started_as_it_froze_may_reach_the_processor_at_the_thaw() -> None:
    # Its lease check passed before the SIGSTOP; the call and the stamp came at the SIGCONT.
    w = two_members()
    w.fault("zombie", 102.5, 115.0, [1])
    w.expire(A, 112.5)
    w.take(B, 0, 0, 112.6)
    w.deliver(2, 113.0, 0, range(10))
    w.deliver(1, 115.002, 0, range(5))
    report = w.check()
    assert only(report.duplicated) == {("zombie", "the batch in hand at the freeze, called at the thaw", True): 5}
    assert report.violations == 0


def test_more_than_one_batch_after_the_thaw_is_a_violation() -> None:
    w = two_members()
    w.fault("zombie", 102.5, 115.0, [1])
    w.expire(A, 112.5)
    w.take(B, 0, 0, 112.6)
    w.deliver(2, 113.0, 0, range(10))
    w.deliver(1, 115.002, 0, range(5))  # the batch in hand
    w.deliver(1, 115.01, 0, range(5, 10))  # a second one: the worker asked no lease
    report = w.check()
    assert only(report.duplicated) == {
        ("zombie", "more than the batch in hand at the freeze started after the thaw", False): 10
    }


def test_more_batches_at_the_thaw_than_worker_threads_is_a_violation() -> None:
    w = two_members()
    w.take(A, 1, 0, 101.0)
    w.take(A, 2, 0, 101.0)
    w.fault("zombie", 102.5, 115.0, [1])
    w.expire(A, 112.5)
    for p in (0, 1, 2):
        w.take(B, p, 0, 112.6)
        w.deliver(2, 113.0, p, range(10))
        w.deliver(1, 115.002 + p / 1000, p, range(5))
    assert only(w.check(threads=3).duplicated) == {
        ("zombie", "the batch in hand at the freeze, called at the thaw", True): 15
    }
    assert only(w.check(threads=2).duplicated) == {
        ("zombie", "more than the batch in hand at the freeze started after the thaw", False): 15
    }


def test_a_batch_at_the_thaw_on_a_partition_not_held_at_the_freeze_is_a_violation() -> None:
    w = two_members()
    w.take(B, 1, 0, 101.0)
    w.deliver(2, 113.0, 1, range(10))
    w.fault("zombie", 102.5, 115.0, [1])
    w.expire(A, 112.5)
    w.deliver(1, 115.002, 1, range(5))
    report = w.check()
    assert only(report.duplicated) == {("zombie", "batch started after the instance's session had expired", False): 5}


def test_a_graceful_leave_that_hands_over_uncommitted_events_is_a_violation() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 5, 102.1)  # the release did not commit the newest advance
    w.fault("leave", 102.5, 103.0, [1])
    w.release(A, 0, 102.9)
    w.close(A, 103.0)
    w.take(B, 0, 5, 103.1)
    w.deliver(2, 103.2, 0, range(5, 10))
    report = w.check()
    assert only(report.duplicated) == {("leave", "handed over without committing what was delivered", False): 5}
    assert report.expired_sessions == []


def test_duplicates_during_a_short_zookeeper_outage_are_violations() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.fault("zk_disconnect", 103.0, 105.0, [1, 2])
    w.deliver(1, 105.5, 0, range(5, 10))  # re-read within the same hold
    report = w.check()
    assert only(report.duplicated) == {("zk_disconnect", "re-read below the committed offset", False): 5}
    assert report.out_of_order.count == 1  # and, within one hold, offsets went back


def test_a_backwards_reset_re_reads_on_purpose() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(20))
    w.commit(A, 0, 20, 102.1)
    w.fault("reset_offset", 103.0, 104.0, [1, 2], [0], id="r1")
    w.reset(A, 0, 5, 103.5, "r1")
    w.deliver(1, 104.0, 0, range(5, 20))
    w.commit(A, 0, 20, 104.1)
    report = w.check()
    assert only(report.duplicated) == {("reset_offset", "re-read on purpose by a backwards reset", True): 15}
    assert report.out_of_order.count == 0 and report.offsets_back.count == 0
    assert report.violations == 0


def test_a_forward_reset_skips_on_purpose() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.produce(0, range(10, 30))
    w.fault("reset_time", 103.0, 104.0, [1, 2], [0], id="r2")
    w.reset(A, 0, 30, 103.5, "r2")
    report = w.check()
    assert only(report.lost) == {("reset_time", "skipped on purpose by a forward reset", True): 20}
    assert report.violations == 0


def test_a_duplicate_next_to_an_injected_processor_failure_is_a_violation() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.callbacks.append(Callback("R", 1, 102.5, TOPIC, 0, "10", 0))
    w.deliver(1, 103.0, 0, range(8, 20))  # the retry started two events early
    report = w.check()
    assert only(report.duplicated) == {("processor_raise", "delivered twice within one hold", False): 2}
    assert report.faults["processor_raise"] == 1


def test_out_of_order_within_a_hold_and_not_across_holds() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.deliver(1, 102.5, 0, range(9, 10))  # offset 9 again, same hold
    w.release(A, 0, 103.0)
    w.take(A, 0, 5, 103.1)  # a new hold of the same session starts lower: no order violation
    w.deliver(1, 103.2, 0, range(5, 6))
    report = w.check()
    assert report.out_of_order.count == 1
    assert "offset 9" in report.out_of_order.examples[0]


def test_a_commit_by_a_session_that_does_not_own_the_partition_is_foreign() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.commit(B, 0, 10, 102.2)  # B passes a check it should not, or skips it
    w.write(B, 0, 4, 102.3)  # and lowers the offset without a reset
    report = w.check()
    assert report.foreign_commits.count == 2
    assert report.offsets_back.count == 1
    assert "while owned by 0xa (pid 1)" in report.foreign_commits.examples[0]
    assert report.as_dict()["ok"] is False


def test_an_expired_lease_commit_after_the_take_over_is_foreign() -> None:
    w = two_members()
    w.expire(A, 110.0)
    w.take(B, 0, 0, 110.1)
    w.commit(A, 0, 10, 110.5)  # the old owner's late commit, accepted
    report = w.check()
    assert report.foreign_commits.count == 1
    assert report.violations == 1


def test_a_record_the_broker_lost_and_whose_offset_it_reused_is_not_a_jetkafka_loss() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(3))
    w.acked[999] = (0, 3)  # acknowledged at offset 3, lost by the broker's restart...
    w.fault("broker_restart", 102.5, 104.0, [1, 2])
    w.deliveries.append(Delivery(1, 104.5, TOPIC, 0, 3, 3, len(w.deliveries)))
    w.acked[3] = (0, 3)  # ...which then acknowledged id 3 at the same offset
    w.deliveries.append(Delivery(1, 104.6, TOPIC, 0, 4, 3, len(w.deliveries)))  # a retry's second copy
    report = w.check()
    assert only(report.lost) == {
        ("broker_restart", "the broker acknowledged it, then gave its offset to another record", True): 1
    }
    assert report.duplicated == {} and report.violations == 0
    assert any("acknowledged 1 offset(s) a second time" in n and "1 of those" in n for n in report.notes)
    assert any("1 record(s) delivered that are second copies" in n for n in report.notes)


def test_an_offset_lowered_to_a_truncated_logs_new_end_is_allowed_and_only_over_what_it_lost() -> None:
    """The broker lost offsets 6..9 (it acknowledged them again for new records): the owner's
    out-of-range policy goes on at the new end, 6, below its commit of 10, and reads the new
    records there. That rewind, and the commit lowered to 6, are the policy at work; lowered
    further than what the broker lost, it is a violation."""
    for lowered_to, violations in ((6, 0), (5, 2)):
        w = two_members()
        w.deliver(1, 102.0, 0, range(10))
        w.commit(A, 0, 10, 102.1)
        w.fault("broker_restart", 103.0, 105.0, [1, 2])
        for o in range(6, 10):  # lost with the broker's tail, then given to new records
            w.acked[5000 + o] = (0, o)
        w.commit(A, 0, lowered_to, 105.5)
        for o in range(lowered_to, 10):
            ident = 5000 + o if o >= 6 else o
            w.deliveries.append(Delivery(1, 106.0, TOPIC, 0, o, ident, len(w.deliveries)))
        report = w.check()
        assert report.offsets_back.count + report.out_of_order.count == violations, (lowered_to, format_table(report))
        if violations == 0:
            assert any("1 committed offset(s) lowered to the log's new end" in n for n in report.notes)


def test_records_read_again_below_a_tail_the_broker_lost_are_allowed_only_around_its_restart() -> None:
    """The broker lost offsets 5.. of the partition (it gave them out again): what the owner had
    read after its last commit, 3 and 4, is read again from the last commit. Allowed around
    that broker restart; the same re-read with no restart near is a violation."""
    for restart_at, violations in ((103.0, 0), (300.0, 2)):
        w = two_members()
        w.deliver(1, 102.0, 0, range(3))
        w.commit(A, 0, 3, 102.1)
        w.deliver(1, 102.5, 0, range(3, 5))  # read, not committed
        w.fault("broker_restart", restart_at, restart_at + 2.0, [1, 2])
        for o in range(5, 8):  # lost with the tail, then given to new records
            w.acked[5000 + o] = (0, o)
            w.acked[6000 + o] = (0, o)
        w.deliveries.extend(
            Delivery(1, 106.0, TOPIC, 0, o, o, len(w.deliveries) + i) for i, o in enumerate(range(3, 5))
        )
        report = w.check()
        assert sum(f.count for c, f in report.duplicated.items() if not c.allowed) == violations, format_table(report)
        if violations == 0:
            assert only(report.duplicated) == {
                ("broker_restart", "read again after the broker lost the partition's tail", True): 2
            }


def test_a_partition_left_without_an_owner_is_a_violation_unless_zookeeper_was_down() -> None:
    w = two_members()
    w.take(B, 1, 0, 101.0)
    w.release(A, 0, 102.0)
    w.take(B, 0, 0, 110.0)  # 8 s without an owner, ZooKeeper serving
    w.fault("zk_restart", 120.0, 126.0, [1, 2])
    w.release(B, 1, 119.5)
    w.take(A, 1, 0, 127.5)  # 8 s, all but one and a half of them with ZooKeeper down
    report = w.check()
    assert report.ownerless.count == 1
    assert "t[0] without an owner for 8.0 s" in report.ownerless.examples[0]
    assert report.violations == 1


def test_a_partition_freed_for_a_member_that_froze_waits_for_the_freeze_not_a_violation() -> None:
    """Seen in a Spark soak: partitions released for a member that had just joined, which a
    zombie fault froze for 12.5 s right then; the others took them once its session expired,
    8.5 to 9.2 s later. The same wait with no member frozen stays a violation."""
    for frozen, violations in ((True, 0), (False, 1)):
        w = two_members()
        w.take(B, 1, 0, 101.0)
        if frozen:
            w.fault("zombie", 101.9, 114.4, [3])
        w.release(A, 0, 102.0)
        w.take(B, 0, 0, 111.0)  # 9 s without an owner
        report = w.check()
        assert report.ownerless.count == violations, report.ownerless.examples


def test_a_partition_freed_for_a_member_killed_meanwhile_waits_for_its_session_not_a_violation() -> None:
    """Seen in a recording soak: a member re-registered after a freeze, the slow partition was
    to go to it, and its release (waiting for a 10 s batch) ended 0.45 s after the member was
    killed; the partition waited for the dead member's session to expire, 9.9 s. The same wait
    with nobody killed stays a violation, and so does one longer than the session's timeout."""
    for killed, taken_at, violations in ((True, 111.9, 0), (False, 111.9, 1), (True, 125.0, 1)):
        w = two_members()
        w.take(B, 1, 0, 101.0)
        if killed:
            w.fault("kill", 101.55, 101.56, [3])
        w.release(A, 0, 102.0)
        w.take(B, 0, 0, taken_at)
        report = w.check()
        assert report.ownerless.count == violations, (killed, taken_at, report.ownerless.examples)

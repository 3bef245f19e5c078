"""Each processing mode's allowances in the soak checker, on synthetic histories.

For every allowance :mod:`tests.soak.guarantee` gives a mode beyond the plain processor's, a
history plants the outcome the guarantee allows and the checker must accept it; then the same
history is pushed just past the bound (one more record, a longer span, a second stale send, a
loss the instance went on from) or judged in a mode that does not allow it, and the checker
must report a violation. So no allowance can pass a history it should not.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from tests.soak.check import _requests_as_deliveries, paused_windows, zookeeper_hangs
from tests.soak.checker import check
from tests.soak.fencing import replay
from tests.soak.report import Report
from tests.soak.world import TOPIC, A, B, World, only, two_members

EXPIRED = "uncommitted batches of an expired session"


# -- SimpleKafkaProcessor: periodic against every-batch ----------------------------------------


def _killed_after(span_s: float) -> World:
    """A killed instance whose uncommitted processing was first delivered over ``span_s``."""
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.deliver(1, 103.0, 0, range(10, 20))
    w.deliver(1, 103.0 + span_s, 0, range(20, 30))
    w.fault("kill", 103.1 + span_s, 103.1 + span_s, [1])
    w.expire(A, 113.2 + span_s)
    w.take(B, 0, 10, 113.3 + span_s)
    w.deliver(2, 113.5 + span_s, 0, range(10, 30))
    w.commit(B, 0, 30, 113.6 + span_s)
    return w


def test_periodic_may_re_deliver_its_interval_after_a_kill_and_every_batch_may_not() -> None:
    # 4 s sessions: every-batch may re-deliver 0.1 s + 4 s (+1 s), periodic 3.1 s more.
    w = _killed_after(7.0)
    periodic = w.check("simple-periodic", interval_ms=3000, session_timeout_s=4)
    assert only(periodic.duplicated) == {("kill", EXPIRED, True): 20}
    assert periodic.violations == 0
    every = w.check("simple-every-batch", session_timeout_s=4)
    assert only(every.duplicated) == {("kill", "more re-delivered after the expiry than the mode allows", False): 20}
    assert "at most 0.1 s of processing plus a round trip (4 s)" in every.duplicated[next(iter(every.duplicated))].examples[0]
    assert only(w.check("batch", session_timeout_s=4).duplicated) == only(every.duplicated)


def test_periodic_re_delivering_more_than_its_interval_is_a_violation() -> None:
    w = _killed_after(8.5)
    report = w.check("simple-periodic", interval_ms=3000, session_timeout_s=4)
    assert only(report.duplicated) == {("kill", "more re-delivered after the expiry than the mode allows", False): 20}
    assert "20 record(s) first delivered over 8.50 s" in report.duplicated[next(iter(report.duplicated))].examples[0]


def test_a_long_batch_that_finished_uncommitted_counts_from_its_return_not_its_start() -> None:
    # A slow sink: a batch takes 10 s. The one that returned just before the instance was lost
    # was stamped when it began, 10 s before the one then in hand; what the commit window bounds
    # is processing that finished uncommitted, so the span runs from its return.
    def slow_then_killed(returned: bool) -> World:
        w = two_members()
        w.deliver(1, 102.0, 0, range(10))
        w.commit(A, 0, 10, 102.1)
        if returned:
            w.batch(1, 103.0, 113.0, 0, range(10, 20))  # its D lines and its E line
        else:
            w.deliver(1, 103.0, 0, range(10, 20))
        w.deliver(1, 113.05, 0, range(20, 30))  # in hand when the process is killed
        w.fault("kill", 113.2, 113.2, [1])
        w.expire(A, 123.3)
        w.take(B, 0, 10, 123.4)
        w.deliver(2, 123.5, 0, range(10, 30))
        w.commit(B, 0, 30, 123.6)
        return w

    within = slow_then_killed(returned=True).check("batch", session_timeout_s=4)
    assert only(within.duplicated) == {("kill", EXPIRED, True): 20} and within.violations == 0
    unknown = slow_then_killed(returned=False).check("batch", session_timeout_s=4)
    assert only(unknown.duplicated) == {("kill", "more re-delivered after the expiry than the mode allows", False): 20}


# -- SimpleKafkaProcessor: no-duplication -------------------------------------------------------


def test_no_duplication_never_re_delivers_even_after_a_kill() -> None:
    w = _killed_after(0.5)
    assert only(w.check("simple-every-batch").duplicated) == {("kill", EXPIRED, True): 20}
    report = w.check("simple-no-duplication")
    assert only(report.duplicated) == {("kill", "re-delivered after a session expiry", False): 20}


def _committed_then_lost(went_on: bool = False, expired: bool = True) -> World:
    w = two_members()
    w.commit(A, 0, 10, 102.0)
    w.deliver(1, 102.1, 0, range(10))
    w.commit(A, 0, 20, 103.0)  # committed before delivering [10, 20)...
    w.produce(0, range(10, 20))  # ...which never happens
    if went_on:
        w.commit(A, 0, 30, 103.5)
        w.deliver(1, 103.6, 0, range(20, 30))
    w.fault("kill" if expired else "leave", 104.0, 104.0, [1])
    if expired:
        w.expire(A, 114.0)
    else:
        w.release(A, 0, 104.0)
        w.close(A, 104.1)
    w.take(B, 0, 30 if went_on else 20, 114.1)
    w.deliver(2, 114.5, 0, range(30 if went_on else 20, 40))
    w.commit(B, 0, 40, 114.6)
    return w


def test_no_duplication_may_lose_the_batch_in_hand_of_a_lost_instance() -> None:
    w = _committed_then_lost()
    report = w.check("simple-no-duplication")
    assert only(report.lost) == {("kill", "committed before delivery; the instance was lost with the batch in hand", True): 10}
    assert report.violations == 0
    assert only(w.check("simple-every-batch").lost) == {("unattributed", "skipped: the group committed past it", False): 10}


def test_no_duplication_losing_a_batch_its_instance_went_on_from_or_handed_over_is_a_violation() -> None:
    went_on = _committed_then_lost(went_on=True).check("simple-no-duplication")
    assert only(went_on.lost) == {("unattributed", "committed before delivery, and never delivered", False): 10}
    graceful = _committed_then_lost(expired=False).check("simple-no-duplication")
    assert only(graceful.lost) == {("unattributed", "committed before delivery, and never delivered", False): 10}


def test_no_duplication_gives_up_a_batch_whose_handler_raised_and_no_other_mode_does() -> None:
    w = two_members()
    w.commit(A, 0, 10, 102.0)
    w.fail(1, 102.1, 0, 0, 10)  # the handler raised on [0, 10): committed, not retried
    w.produce(0, range(10))
    w.commit(A, 0, 20, 103.0)
    w.deliver(1, 103.1, 0, range(10, 20))
    w.produce(0, range(20, 23))  # never reached: no failure covers these
    report = w.check("simple-no-duplication")
    assert only(report.lost) == {
        ("processor_raise", "its handler raised and the batch, committed already, is not retried", True): 10,
        ("unattributed", "stalled: the partition never got this far", False): 3,
    }
    assert only(w.check("simple-periodic").lost)[("unattributed", "skipped: the group committed past it", False)] == 10


# -- the CloudEvents dispatcher ----------------------------------------------------------------


def _dispatcher_killed(in_flight: int) -> World:
    """A dispatcher killed with ``in_flight`` records sent since its last commit; fencing tokens
    as ZooKeeper counts them: A's hold 1, its commit 2, B's take 3."""
    w = two_members()
    w.deliver(1, 102.0, 0, range(10), epoch=1)
    w.commit(A, 0, 10, 102.1)
    w.deliver(1, 102.5, 0, range(10, 10 + in_flight), epoch=1)
    w.fault("kill", 102.6, 102.6, [1])
    w.expire(A, 112.6)
    w.take(B, 0, 10, 112.7)
    w.deliver(2, 113.0, 0, range(10, 30), epoch=3)
    w.commit(B, 0, 30, 113.1)
    return w


def test_dispatcher_re_sends_at_most_the_batch_in_flight_after_a_kill() -> None:
    w = _dispatcher_killed(in_flight=5)
    report = w.check("dispatcher", batch_max_events=5)
    assert only(report.duplicated) == {("kill", EXPIRED, True): 5}
    assert report.violations == 0
    over = w.check("dispatcher", batch_max_events=4)
    assert only(over.duplicated) == {("kill", "more re-delivered after the expiry than the mode allows", False): 5}
    assert "after a kill at most the batch in flight (4)" in next(iter(over.duplicated.values())).examples[0]


def test_dispatcher_after_zookeeper_froze_past_the_session_is_bound_by_time_not_by_the_batch() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10), epoch=1)
    w.commit(A, 0, 10, 102.1)
    w.fault("zk_expire", 102.2, 109.0, [1, 2])
    for i in range(30):  # commits sent into the frozen server never land
        w.deliver(1, 102.2 + i * 0.1, 0, range(10 + i, 11 + i), epoch=1)
    w.expire(A, 109.0)
    w.take(B, 0, 10, 109.2)
    w.deliver(2, 109.5, 0, range(10, 40), epoch=3)
    report = w.check("dispatcher", batch_max_events=5, session_timeout_s=4)
    assert only(report.duplicated) == {("zk_expire", EXPIRED, True): 30}


def test_a_re_sent_record_whose_commit_zookeeper_stamped_in_the_same_millisecond_is_not_a_re_read() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10), epoch=1)
    w.commit(A, 0, 10, 102.1)
    w.fault("zk_expire", 102.2, 109.0, [1, 2])
    w.deliver(1, 102.5, 0, range(10, 20), epoch=1)  # sent into the freeze, never committed
    w.expire(A, 109.0)
    w.member(0xA2, 1, 109.5)  # the same process, a new session, takes the partition back
    w.take(0xA2, 0, 10, 109.6)  # token 3
    w.deliver(1, 110.0004, 0, range(10, 20), epoch=3)
    w.commit(0xA2, 0, 20, 110.0)  # stamped 110.000: the commit that follows the batch's last request
    report = w.check("dispatcher", batch_max_events=20, session_timeout_s=4)
    assert only(report.duplicated) == {("zk_expire", EXPIRED, True): 10}
    w.deliver(1, 110.5, 0, range(15, 16), epoch=3)  # sent again half a second after that commit
    assert only(w.check("dispatcher", batch_max_events=20, session_timeout_s=4).duplicated)[
        ("zk_expire", "re-read below the committed offset", False)
    ] == 1


def _woken(stale_records: int) -> World:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10), epoch=1)
    w.commit(A, 0, 10, 102.1)
    w.fault("zombie", 102.5, 117.0, [1])
    w.expire(A, 112.5)
    w.take(B, 0, 10, 112.6)
    w.deliver(2, 113.0, 0, range(10, 20), epoch=3)
    w.commit(B, 0, 20, 113.1)
    w.deliver(1, 117.1, 0, range(10, 10 + stale_records), epoch=1)  # sent on SIGCONT under the old token
    return w


def test_a_woken_dispatcher_may_send_the_one_record_it_had_in_flight_and_no_more() -> None:
    stale = "sent under a hold that had ended: the record in flight when the instance froze"
    one = _woken(1)
    assert only(one.check("dispatcher").duplicated) == {("zombie", stale, True): 1}
    two = _woken(2).check("dispatcher")
    assert only(two.duplicated) == {("zombie", "more than the record in flight sent after the hold ended", False): 2}
    assert "at most 1 per hold" in next(iter(two.duplicated.values())).examples[0]
    # A plain processor has no such allowance.
    assert only(one.check("batch").duplicated) == {("zombie", stale, False): 1}


def test_subscriber_requests_are_placed_in_the_process_of_the_hold_whose_token_they_carry(tmp_path: Path) -> None:
    w = _woken(1)
    (tmp_path / "subscriber.log").write_text(
        "H 113.000000 t 0 10 10 3 503\n"  # B's first attempt, refused on purpose
        "H 113.100000 t 0 10 10 3 200\n"
        "H 117.100000 t 0 10 10 1 200\n"  # A's stale send
        "H 117.200000 t 0 11 11 7 200\n"  # a token no hold had
    )
    deliveries, failures = _requests_as_deliveries(tmp_path, replay(w.txns, "g"))
    assert [(d.pid, d.offset, d.epoch) for d in deliveries] == [(2, 10, 3), (1, 10, 1), (-1, 11, 7)]
    assert [(f.kind, f.pid, f.detail, f.count) for f in failures] == [("R", 2, "10", 1)]


# -- recovery of backlogs ------------------------------------------------------------------------


def _recovering(killed: bool = True) -> World:
    """A took partition 0 with a backlog: live from 100, [0, 100) in recovery. It stored the
    recovery of [0, 20), had [20, 40) in hand when it was killed (or left), and B finished."""
    w = World()
    w.member(A, 1, 100.0)
    w.member(B, 2, 100.0)
    w.take(A, 0, 100, 101.0)
    w.ranges(A, 0, [(0, 100)], 101.0)
    w.deliver(1, 102.0, 0, range(100, 110))
    w.commit(A, 0, 110, 102.1)
    w.deliver(1, 102.5, 0, range(20), recovery=True)
    w.ranges(A, 0, [(20, 100)], 102.6)
    w.deliver(1, 103.0, 0, range(20, 40), recovery=True)
    if killed:
        w.fault("kill", 103.5, 103.5, [1])
        w.expire(A, 113.5)
    else:
        w.fault("leave", 103.5, 103.6, [1])
        w.release(A, 0, 103.6)
        w.close(A, 103.7)
    w.take(B, 0, 110, 113.6)
    w.deliver(2, 114.0, 0, range(20, 100), recovery=True)
    w.ranges(B, 0, [], 114.1)
    return w


def test_recovery_re_processes_at_most_one_recovery_batch_after_a_kill() -> None:
    w = _recovering()
    report = w.check("recovery", recovery_batch_max_events=20)
    assert only(report.duplicated) == {("kill", "the recovery batch in hand of an expired session", True): 20}
    assert report.violations == 0 and report.lost == {}
    over = w.check("recovery", recovery_batch_max_events=10)
    assert only(over.duplicated) == {("kill", "more than one recovery batch re-processed after the expiry", False): 20}
    w.deliver(2, 114.5, 0, range(15, 20), recovery=True)  # stored as recovered before the kill
    assert only(w.check("recovery", recovery_batch_max_events=20).duplicated)[
        ("kill", "re-read below the offset committed before the expiry", False)
    ] == 5


def test_recovery_handed_over_gracefully_re_processes_nothing() -> None:
    report = _recovering(killed=False).check("recovery", recovery_batch_max_events=20)
    assert only(report.duplicated) == {("leave", "handed over without committing what was delivered", False): 20}


def _reset_into_a_range(with_range: bool) -> World:
    w = World()
    w.member(A, 1, 100.0)
    w.member(B, 2, 100.0)
    w.take(A, 0, 100, 101.0)
    if with_range:
        w.ranges(A, 0, [(0, 100)], 101.0)
    w.deliver(1, 102.0, 0, range(100, 120))
    w.commit(A, 0, 120, 102.1)
    w.fault("reset_offset", 103.0, 103.5, [1, 2], [0], id="r1")
    w.reset(A, 0, 50, 103.2, "r1")
    w.deliver(1, 104.0, 0, range(50, 120))
    w.commit(A, 0, 120, 104.1)
    w.deliver(1, 105.0, 0, range(100), recovery=True)  # recovery reaches what live read again
    if with_range:
        w.ranges(A, 0, [], 105.1)
    return w


def test_a_reset_back_into_a_recovery_range_delivers_it_live_and_by_recovery() -> None:
    report = _reset_into_a_range(with_range=True).check("recovery")
    assert only(report.duplicated) == {("reset_offset", "re-read on purpose by a backwards reset", True): 70}
    assert report.violations == 0
    # Without a range there, recovery had no business delivering them again.
    without = _reset_into_a_range(with_range=False).check("recovery")
    assert only(without.duplicated)[("reset_offset", "re-read below the committed offset", False)] == 50


def test_records_left_in_a_recovery_range_are_stalled_unless_deleted_from_it() -> None:
    def world(deleted: bool) -> World:
        w = World()
        w.member(A, 1, 100.0)
        w.take(A, 0, 100, 101.0)
        w.ranges(A, 0, [(0, 100)], 101.0)
        w.deliver(1, 102.0, 0, range(100, 110))
        w.commit(A, 0, 110, 102.1)
        w.deliver(1, 102.5, 0, range(50), recovery=True)
        w.ranges(A, 0, [(50, 100)], 102.6)
        w.produce(0, range(50, 100))
        if deleted:  # the broker deleted below 115 while [50, 100) waited: trimmed, counted as lost
            w.produce(0, range(110, 115))
            w.fault("out_of_range", 104.0, 106.0, [1], [0], committed=110, deleted_below=115)
            w.ranges(A, 0, [], 106.5)
        return w

    assert only(world(deleted=True).check("recovery").lost) == {
        ("out_of_range", "deleted from the broker before anyone read it", True): 55
    }
    assert only(world(deleted=False).check("recovery").lost) == {
        ("unattributed", "stalled: the partition never got this far", False): 50
    }


# -- pauses --------------------------------------------------------------------------------------


def _paused_group(tmp_path: Path) -> tuple[World, dict[int, list[tuple[float, float]]]]:
    """The group paused from 103 (pid 1 applied it at 103.2, by its log) to 106."""
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.fault("pause_group", 103.0, 106.5, [1, 2])
    w.pause(0xC, "_all", 103.0)
    w.deliver(1, 103.25, 0, range(10, 12))  # the batch in hand, stamped as it started...
    w.resume(0xC, "_all", 106.0)
    w.deliver(1, 106.2, 0, range(12, 20))
    w.commit(A, 0, 20, 106.3)
    stamp = datetime.fromtimestamp(103.2).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    (tmp_path / "m1.log").write_text(f"{stamp} INFO    jetkafka.channel [jetkafka-rebalance] paused all partitions\n")
    return w, paused_windows(tmp_path, replay(w.txns, "g"), {"m1": 1, "m2": 2})


def test_a_batch_started_while_paused_is_a_violation_and_the_batch_in_hand_is_not(tmp_path: Path) -> None:
    w, paused = _paused_group(tmp_path)
    assert paused == {1: [(103.2, 106.0)]}  # pid 2 never logged applying it: nothing to hold it to
    assert w.check("batch", paused=paused).violations == 0
    w.deliver(1, 104.0, 0, range(20, 25), recovery=True)  # a recovery batch started while paused
    report = w.check("recovery", paused=paused)
    assert report.while_paused.count == 5 and report.violations == 5
    assert "(recovery) at 104.000: paused at 103.200 until 106.000" in report.while_paused.examples[0]
    # A dispatcher's requests are per record: its batch in hand goes on after a pause.
    assert w.check("dispatcher", paused=paused).while_paused.count == 0


# -- the dev stack's own defects -----------------------------------------------------------------


def _cut_off_by_a_restart() -> World:
    """ZooKeeper restarted 105..106.5; A's session expired at 110.6 and B re-read its work."""
    w = two_members()
    w.deliver(1, 104.8, 0, range(10))
    w.fault("zk_restart", 105.0, 106.5, [1, 2])
    w.expire(A, 110.6)
    w.take(B, 0, 0, 110.8)
    w.deliver(2, 111.0, 0, range(10))
    w.commit(B, 0, 10, 111.1)
    return w


def test_an_expiry_the_zookeeper_server_caused_by_hanging_a_reconnection_is_its_defect(tmp_path: Path) -> None:
    log = tmp_path / "stack" / "zookeeper" / "zookeeper.log"
    log.parent.mkdir(parents=True)
    at = datetime.fromtimestamp(106.6).strftime("%Y-%m-%dT%H:%M:%S,%f")[:-3]
    log.write_text(
        f"{at} WARN  [NIOWorkerThread-2] WorkerService: Unexpected exception\n"
        'java.lang.NullPointerException: Cannot invoke "org.apache.zookeeper.server.ZKDatabase.removeCnxn(...)" '
        'because "this.zkDb" is null\n'
    )
    hangs = zookeeper_hangs(tmp_path)
    assert [round(h, 3) for h in hangs] == [106.6]
    w = _cut_off_by_a_restart()
    report = check_with_hangs(w, hangs)
    assert only(report.duplicated) == {
        ("zk_restart", "uncommitted batches of a session the ZooKeeper server expired as it started (its defect)", True): 10
    }
    assert any("gave 1 session(s) no chance to reconnect" in n and "0xa" in n for n in report.notes)
    # Without the server's evidence, an expiry after a restart shorter than the session is a failure.
    plain = check_with_hangs(w, [])
    assert only(plain.duplicated) == {("zk_restart", "re-delivered after a session expiry", False): 10}
    # One hang explains one expiry, and only within a session timeout of it.
    assert only(check_with_hangs(w, [95.0]).duplicated) == only(plain.duplicated)


def test_an_expiry_right_after_a_stalled_start_of_the_zookeeper_server_is_its_defect(tmp_path: Path) -> None:
    # The server restored the sessions (their clock running), stalled before it served, and
    # expired them 0.6 s after it began to: no client could have reconnected in time.
    log = tmp_path / "stack" / "zookeeper" / "zookeeper.log"
    log.parent.mkdir(parents=True)

    def at(t: float) -> str:
        return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S,%f")[:-3]

    log.write_text(
        f"{at(110.0)} INFO  [main] ContainerManager: Using checkIntervalMs=60000 maxPerMinute=10000\n"
        f"{at(110.6)} INFO  [SessionTracker] ZooKeeperServer: Expiring session 0xa, timeout of 4000ms exceeded\n"
    )
    w = _cut_off_by_a_restart()
    report = check_with_hangs(w, zookeeper_hangs(tmp_path, session_timeout_s=4))
    assert only(report.duplicated) == {
        ("zk_restart", "uncommitted batches of a session the ZooKeeper server expired as it started (its defect)", True): 10
    }
    # Without the timeout, or with an expiry a whole session timeout after the server served,
    # it is the client's to explain: a failure here.
    assert zookeeper_hangs(tmp_path) == []
    log.write_text(
        f"{at(105.0)} INFO  [main] ContainerManager: Using checkIntervalMs=60000 maxPerMinute=10000\n"
        f"{at(110.6)} INFO  [SessionTracker] ZooKeeperServer: Expiring session 0xa, timeout of 4000ms exceeded\n"
    )
    assert zookeeper_hangs(tmp_path, session_timeout_s=4) == []


def check_with_hangs(w: World, hangs: list[float]) -> Report:
    return check(
        mode="batch", topic=TOPIC, acked=w.acked, deliveries=w.deliveries, callbacks=w.callbacks, faults=w.faults,
        zk=replay(w.txns, "g"), session_timeout_s=4, server_hangs=hangs,
    )

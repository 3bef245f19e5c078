"""The soak checker's isolation measures on synthetic histories (:mod:`tests.soak.isolation`).

Each partition's longest wait (acknowledgement to first delivery); a partition held back by one
under a condition (poisoned, slow), within the bound and just past it; two batches of one
partition in one process's hands at once; the batch in hand when a SIGTERM's shutdown ran out,
read again by the next owner (one batch, and only after a shutdown that did run out), and a
batch handed over in hand named after what ended its hold; the cure of a poison, a forward
reset whose skipped records are the reset's allowed loss.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.soak.conditions import REREAD_S, ConditionView, write_conditions
from tests.soak.history import Delivery
from tests.soak.report import format_table
from tests.soak.world import TOPIC, A, B, World, only, two_members


def _one_owner_of_four() -> World:
    w = two_members()
    for p in (1, 2, 3):
        w.take(A, p, 0, 101.0)
    return w


def _waited(w: World, p: int, seconds: float, at: float = 110.0) -> None:
    """Partition ``p``'s records 0..9 acknowledged at ``at``, the first delivered ``seconds``
    later and the rest at once."""
    w.produce(p, range(10), at=at)
    w.deliver(1, at + seconds, p, range(1))
    w.deliver(1, at + 0.05, p, range(1, 10))


def test_each_partitions_longest_wait_runs_from_its_acknowledgement_to_its_first_delivery() -> None:
    w = _one_owner_of_four()
    w.produce(0, range(5), at=100.0)
    w.deliver(1, 102.5, 0, range(3))  # offsets 0..2 waited 2.5 s
    w.deliver(1, 103.0, 0, range(3, 5))  # offsets 3, 4 waited 3 s
    w.deliver(1, 120.0, 0, range(5))  # read again later (a reset, say): not a wait
    w.produce(1, range(2), at=105.0)
    w.deliver(1, 104.9, 1, range(2))  # delivered before the acknowledgement came: no wait
    report = w.check()
    assert {p: (round(wt.seconds, 3), wt.offset) for p, wt in report.waits.items()} == {0: (3.0, 3), 1: (0.0, 0)}
    assert report.as_dict()["longest_waits"]["0"] == {"seconds": 3.0, "offset": 3, "acknowledged": 100.0, "delivered": 103.0}
    assert "records waiting, acknowledged and not yet delivered" in format_table(report)
    assert report.held_back.count == 0  # nothing was held back on purpose: nothing to compare


def test_an_offset_the_broker_acknowledged_twice_is_no_wait() -> None:
    # The dev broker lost an acknowledged tail in a restart and gave offset 3 to a new record:
    # the group had read offset 3 already, so the new record came only with a later reset.
    w = _one_owner_of_four()
    w.produce(0, range(5), at=100.0)
    w.deliver(1, 101.0, 0, range(5))
    w.acked[9003], w.acked_at[9003] = (0, 3), 104.0
    w.deliveries.append(Delivery(1, 200.0, TOPIC, 0, 3, 9003, len(w.deliveries)))
    report = w.check()
    assert {p: round(wt.seconds, 3) for p, wt in report.waits.items()} == {0: 1.0}


def _poisoned_beside(other_wait_s: float, kind: str = "poison") -> World:
    """Partition 0 held 60 s by ``kind``; partition 1 waited ``other_wait_s``, 2 and 3 1 s."""
    w = _one_owner_of_four()
    w.fault(kind, 105.0, 170.0, [], [0], offset=5)
    _waited(w, 0, 60.0)
    _waited(w, 1, other_wait_s)
    _waited(w, 2, 1.0)
    _waited(w, 3, 1.0)
    return w


def test_other_partitions_waiting_under_a_third_as_long_as_the_poisoned_one_were_not_held_back() -> None:
    report = _poisoned_beside(19.9).check()
    assert report.held_back.count == 0 and report.violations == 0
    assert any("longest waits: poison [0] 60.0 s; the other partitions at most 19.9 s (0.33" in n for n in report.notes)


def test_another_partition_waiting_a_third_as_long_as_the_poisoned_one_was_held_back() -> None:
    report = _poisoned_beside(20.0).check()
    assert report.held_back.count == 1 and report.violations == 1
    assert "t[1] waited 20.0 s" in report.held_back.examples[0]
    assert "the poison t[0] 60.0 s: under 0.33 of it (20.0 s)" in report.held_back.examples[0]
    assert report.as_dict()["held_back"]["count"] == 1


def test_the_same_bound_holds_beside_a_slow_partition() -> None:
    assert _poisoned_beside(19.9, "slow").check().held_back.count == 0
    report = _poisoned_beside(20.0, "slow").check()
    assert report.held_back.count == 1 and "the slow t[0]" in report.held_back.examples[0]


def test_with_two_partitions_held_back_the_others_are_measured_against_the_shorter_wait() -> None:
    w = _poisoned_beside(8.0)
    w.fault("slow", 175.0, 200.0, [], [3], batch_s=2.0)
    w.produce(3, range(10, 12), at=175.0)
    w.deliver(1, 200.0, 3, range(10, 12))  # partition 3 waited 25 s: 8 s is under a third of it
    assert w.check().held_back.count == 0
    w.deliver(1, 199.0, 3, range(10, 12))  # first delivered a second sooner, 24 s: 8 s is a third of it
    report = w.check()
    assert report.held_back.count == 1 and "the slow t[3] 24.0 s" in report.held_back.examples[0]


def test_two_batches_of_one_partition_in_hand_at_once_in_one_process_are_a_violation() -> None:
    w = two_members()
    w.take(B, 1, 0, 101.0)
    w.batch(1, 102.0, 104.0, 0, range(10))
    w.batch(1, 104.0, 104.1, 0, range(10, 20))  # after the first returned: fine
    w.batch(1, 104.05, 104.2, 0, range(20, 30))  # before the second returned: two threads on [0]
    w.batch(1, 102.5, 102.6, 0, range(100, 101), recovery=True)  # a recovery batch beside live ones: fine
    w.batch(2, 102.5, 102.6, 1, range(10))  # another partition, another process: fine
    report = w.check()
    assert report.overlapping.count == 1 and report.violations == 1
    assert "pid 1 t[0]: the batch from offset 20 started at 104.050 while the one from 10" in report.overlapping.examples[0]


def _left_with_a_batch_in_hand(exit_code: int, returned_before: bool = False) -> World:
    """Member 1 gets SIGTERM at 103.0 with a batch of [0] started at 102.5 still in hand; its
    shutdown_timeout_s (1 s) runs out at 104.0, it exits ``exit_code``; member 2 takes [0] from
    the last commit (10) and reads it again. With ``returned_before``, an earlier batch returned
    before the shutdown ran out, uncommitted too."""
    w = two_members()
    w.batch(1, 102.0, 102.1, 0, range(10))
    w.commit(A, 0, 10, 102.2)
    if returned_before:
        w.batch(1, 102.3, 102.4, 0, range(10, 15))
        w.deliver(1, 102.5, 0, range(15, 20))
    else:
        w.deliver(1, 102.5, 0, range(10, 20))  # in hand until the process ended: no E line
    w.fault("leave", 103.0, 104.2, [1], exit=exit_code)
    w.close(A, 104.1)
    w.take(B, 0, 10, 104.2)
    w.deliver(2, 104.3, 0, range(10, 20))
    w.commit(B, 0, 20, 104.4)
    return w


def test_the_batch_in_hand_when_a_sigterms_shutdown_ran_out_may_be_read_again() -> None:
    report = _left_with_a_batch_in_hand(exit_code=1).check(shutdown_timeout_s=1)
    assert only(report.duplicated) == {
        ("leave", "in hand when the SIGTERM's shutdown_timeout_s ran out, read again by the next owner", True): 10
    }
    assert report.violations == 0


def test_after_a_shutdown_that_did_not_run_out_nothing_may_be_read_again() -> None:
    report = _left_with_a_batch_in_hand(exit_code=0).check(shutdown_timeout_s=1)
    assert only(report.duplicated) == {("leave", "handed over without committing what was delivered", False): 10}


def test_a_batch_that_had_returned_before_the_shutdown_ran_out_may_not_be_read_again() -> None:
    report = _left_with_a_batch_in_hand(exit_code=1, returned_before=True).check(shutdown_timeout_s=1)
    assert only(report.duplicated) == {
        ("leave", "handed over without committing what was delivered", False): 5,
        ("leave", "in hand when the SIGTERM's shutdown_timeout_s ran out, read again by the next owner", True): 5,
    }


def test_a_batch_handed_over_in_hand_is_named_after_what_ended_its_hold() -> None:
    """A resubscribe of member 1 outlasted by its batch: the owner node went 6 s later, member 2
    took the partition and read the batch again (two threads on one partition), as member 2
    was getting a SIGTERM of its own. The violation is the resubscribe's, not the SIGTERM's."""
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.fault("deploy_resubscribe", 102.0, 102.4, [1])
    w.release(A, 0, 108.0)
    w.take(B, 0, 0, 108.1)
    w.deliver(2, 108.2, 0, range(10))
    w.fault("leave", 108.25, 109.0, [2], exit=0)
    assert only(w.check().duplicated) == {
        ("deploy_resubscribe", "handed over without committing what was delivered", False): 10
    }


def test_the_cure_of_a_poison_skips_its_batch_on_purpose_and_nothing_else() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 10, 102.1)
    w.fault("poison", 102.0, 110.0, [], [0], offset=13)
    w.produce(0, range(10, 14))  # the poison's batch: 10..13, never delivered
    w.fault("cure", 109.0, 110.0, [1, 2], [0], id="c1")
    w.reset(A, 0, 14, 109.5, "c1")
    w.deliver(1, 109.6, 0, range(14, 20))
    w.commit(A, 0, 20, 109.7)
    report = w.check()
    assert only(report.lost) == {("cure", "skipped on purpose by a forward reset", True): 4}
    assert report.violations == 0


def test_members_see_a_condition_set_and_lifted_within_the_reread_interval(tmp_path: Path) -> None:
    path = tmp_path / "conditions.json"
    view = ConditionView(str(path))
    assert view.poison(3) is None and view.slow_s(3) == 0.0  # no file yet
    write_conditions(path, {3: 120}, {5: 2.0})
    time.sleep(REREAD_S + 0.05)
    assert (view.poison(3), view.poison(4), view.slow_s(5)) == (120, None, 2.0)
    write_conditions(path, {}, {5: 2.0})
    assert view.poison(3) == 120  # read again only after the interval
    time.sleep(REREAD_S + 0.05)
    assert view.poison(3) is None and view.slow_s(5) == 2.0
    assert json.loads(path.read_text()) == {"poisoned": {}, "slow": {"5": 2.0}}

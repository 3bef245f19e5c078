"""HeldLeases: each lease's way from its take to its owner node's end, without ZooKeeper."""

from __future__ import annotations

import time

from jetkafka.coordination._held_leases import RETAKE_FIRST_S, RETAKE_MAX_S, HeldLeases
from jetkafka.coordination._ownership import Lease


def lease(p: int, version: int = 0) -> Lease:
    return Lease("t", p, "me", owner_version=version, offset_version=0, committed=None)


def test_a_take_recorded_after_the_session_expired_is_not_held_but_kept_for_deleting() -> None:
    leases = HeldLeases()
    wanted, expiries = leases.wanted("t", [0, 1])
    assert wanted == [0, 1]
    assert leases.record_take(lease(0), expiries)
    assert leases.expire() == [("t", 0)]
    old = lease(1)
    assert not leases.record_take(old, expiries)  # begun in the expired session
    assert leases.get(("t", 1)) is None
    assert leases.unreleased() == [(("t", 1), old)]
    assert leases.accounted("t") == {1}


def test_ending_an_old_hold_leaves_a_newer_hold_of_the_same_partition_alone() -> None:
    leases = HeldLeases()
    _, expiries = leases.wanted("t", [0])
    first, second = lease(0, 1), lease(0, 2)
    leases.record_take(first, expiries)
    leases.end(("t", 0), first)
    leases.deleted(("t", 0), first)
    leases.record_take(second, expiries)
    assert leases.end(("t", 0), first) is None
    assert leases.get(("t", 0)) is second


def test_an_ended_lease_stays_unreleased_until_its_owner_node_is_deleted() -> None:
    leases = HeldLeases()
    _, expiries = leases.wanted("t", [0])
    held = lease(0)
    leases.record_take(held, expiries)
    assert leases.end(("t", 0), None) == (held, False)
    assert leases.any_unreleased() and leases.accounted("t") == {0}
    leases.deleted(("t", 0), lease(0, 9))  # another lease's delete does not count
    assert leases.any_unreleased()
    leases.deleted(("t", 0), held)
    assert not leases.any_unreleased() and leases.accounted("t") == set()


def test_a_lease_given_up_before_adoption_is_backed_off_doubling_and_adoption_clears_it() -> None:
    leases = HeldLeases()
    _, expiries = leases.wanted("t", [0])
    held = lease(0)
    leases.record_take(held, expiries)
    leases.handing_over([held])
    assert leases.not_adopted([held]) == [held]
    assert leases.end(("t", 0), held) == (held, True)
    assert leases.back_off(("t", 0)) == RETAKE_FIRST_S
    assert leases.back_off(("t", 0)) == 2 * RETAKE_FIRST_S
    for _ in range(10):
        wait = leases.back_off(("t", 0))
    assert wait == RETAKE_MAX_S
    assert leases.wanted("t", [0, 1])[0] == [1]
    end = leases.next_retake(time.monotonic())
    assert end is not None and end > time.monotonic()
    again = lease(0, 1)
    leases.record_take(again, expiries)
    leases.adopted(again)
    assert leases.wanted("t", [0])[0] == [0]


def test_releasing_marks_each_held_partition_once() -> None:
    leases = HeldLeases()
    _, expiries = leases.wanted("t", [0, 1])
    leases.record_take(lease(0), expiries)
    leases.record_take(lease(1), expiries)
    assert leases.start_releasing([("t", 0), ("t", 5)]) == [("t", 0)]
    assert leases.start_releasing(leases.held_keys()) == [("t", 1)]
    assert leases.start_releasing(leases.held_keys("t")) == []


def test_leases_whose_owner_node_names_another_consumer_are_dropped() -> None:
    leases = HeldLeases()
    _, expiries = leases.wanted("t", [0, 1])
    leases.record_take(lease(0), expiries)
    leases.record_take(lease(1), expiries)
    assert leases.drop_not_owned("t", {0: "me", 1: "other"}, "me") == [("t", 1)]
    assert leases.held_keys() == [("t", 0)]
    assert [lease_.key for lease_ in leases.clear()] == [("t", 0)]
    assert leases.held_keys() == []


def test_a_lease_handed_over_and_expired_before_its_adoption_is_reported_not_held_at_adoption() -> None:
    # The channel adopts after slow calls; an expiry meanwhile names only the leases held then,
    # and this one reaches no state yet: its adoption must tell the channel it is gone.
    leases = HeldLeases()
    _, expiries = leases.wanted("t", [0, 1])
    expired, live = lease(0), lease(1)
    assert leases.record_take(expired, expiries)
    leases.handing_over([expired])
    assert leases.expire() == [("t", 0)]
    assert not leases.adopted(expired)
    assert leases.not_adopted([expired]) == []  # nothing left to give up: the node went with the session
    _, expiries = leases.wanted("t", [1])
    assert leases.record_take(live, expiries)
    leases.handing_over([live])
    assert leases.adopted(live)

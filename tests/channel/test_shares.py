"""Who wants room and who gives it back (jetkafka.channel._shares), on real partition states."""

from __future__ import annotations

import time
from types import SimpleNamespace

from confluent_kafka import Message

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._partition import PartitionState
from jetkafka.channel._shares import SETTLE_S, SHED_AFTER_S, BufferShares, has_room, wants_room

TOPIC = "orders"


class Lookups:
    def __init__(self) -> None:
        self.asked: list[list[int]] = []

    def look_up(self, states: list[PartitionState]) -> None:
        self.asked.append([s.partition for s in states])


def owned(count: int, share: int = 100) -> tuple[list[PartitionState], BufferBudget]:
    budget = BufferBudget(share, 1 << 30)
    budget.set_partitions(count)
    states = []
    for p in range(count):
        lease = SimpleNamespace(topic=TOPIC, partition=p, key=(TOPIC, p), committed=None)
        states.append(PartitionState(lease, 0, share, 1 << 30, budget))  # type: ignore[arg-type]
    return states, budget


def fill(state: PartitionState, start: int, count: int, log_end: int | None = None) -> None:
    run = [Message(topic=TOPIC, partition=state.partition, offset=o, value=b"x") for o in range(start, start + count)]
    state.buffer.append(run, log_end)


def test_nobody_wants_room_while_quiet_partitions_are_at_their_log_end() -> None:
    states, budget = owned(3)
    hog, quiet, _ = states
    fill(hog, 0, 300, log_end=10_000)
    fill(quiet, 0, 5, log_end=5)
    lookups = Lookups()
    shares = BufferShares(lambda: states, lookups)  # type: ignore[arg-type]
    assert budget.spent() and not wants_room(quiet) and has_room(quiet)
    assert shares.check(spent=True) == []
    assert hog.buffer.buffered == 300  # borrowing is free while nobody else has records waiting
    assert lookups.asked == [[1, 2]]  # while spent, the broker is asked for the others' log ends


def test_a_stuck_partition_gives_back_what_it_borrowed_once_another_has_records_waiting() -> None:
    states, budget = owned(3)
    stuck, quiet, _ = states
    fill(stuck, 0, 300, log_end=10_000)
    stuck.redeliver = [object()]  # failing under on_error: retry
    quiet.buffer.note_log_end(7)  # found by the log-end watch
    shares = BufferShares(lambda: states, Lookups())  # type: ignore[arg-type]
    # Even while a worker waits downstream: a partition that cannot drain is never excused.
    with budget.waiting_downstream():
        fill(stuck, 300, 1, log_end=10_000)
        assert shares.check(spent=True) == [stuck]
    assert stuck.buffer.buffered == 100 and not budget.spent() and shares.events_shed == 201
    assert shares.others_want_room


def test_a_slow_partition_is_held_at_its_share_while_others_want_room() -> None:
    states, budget = owned(4)
    slow, busy, _, _ = states
    fill(slow, 0, 150, log_end=10_000)
    fill(busy, 0, 10, log_end=10_000)
    shares = BufferShares(lambda: states, Lookups())  # type: ignore[arg-type]
    assert not budget.spent()
    assert shares.check(spent=False) == [slow]
    assert slow.buffer.fetch_paused and slow.buffer.buffered == 150  # held, nothing dropped
    assert shares.check(spent=False) == []  # once


def test_a_draining_partition_is_excused_while_a_worker_waits_downstream() -> None:
    states, budget = owned(2)
    busy, hungry = states
    with budget.waiting_downstream():
        fill(busy, 0, 200, log_end=10_000)
    hungry.buffer.note_log_end(50)
    shares = BufferShares(lambda: states, Lookups())  # type: ignore[arg-type]
    assert shares.check(spent=True) == []
    assert busy.buffer.buffered == 200


def test_paused_halted_and_failing_partitions_do_not_want_room() -> None:
    states, _ = owned(3)
    for state in states:
        state.buffer.note_log_end(100)
    states[0].paused = True
    states[1].halted = "out of range"
    states[2].redeliver = [object()]
    assert not any(map(wants_room, states))


def test_a_draining_partition_is_held_first_and_gives_back_only_if_still_beyond_its_share() -> None:
    # One poll can hand a fast partition a run beyond its share: it processes that at once, and
    # dropping it would only fetch it again. A slow one is still beyond its share a while later.
    states, budget = owned(3)
    busy, hungry, _ = states
    fill(busy, 0, 250, log_end=10_000)
    fill(states[2], 0, 250, log_end=10_000)
    fill(hungry, 0, 100, log_end=10_000)
    hungry.buffer.take_batch(60, 1 << 30)  # 40 left: below half its share, records waiting
    shares = BufferShares(lambda: states, Lookups())  # type: ignore[arg-type]
    fill(busy, 250, 100, log_end=10_000)  # spends the budget
    assert budget.spent()
    assert shares.check(spent=True) == [busy, states[2]]  # held, nothing dropped yet
    assert busy.buffer.buffered == 350 and shares.events_shed == 0
    busy.buffer.held_since = busy.buffer.held_since - SHED_AFTER_S  # type: ignore[operator]
    assert shares.check(spent=True) == [busy]
    assert busy.buffer.buffered == 100 and shares.events_shed == 250


def test_a_log_end_that_holds_no_record_stops_wanting_room_once_nothing_comes(monkeypatch) -> None:
    # On a transactional topic the log ends with a commit marker: one offset beyond the last
    # record, never delivered. A quiet partition there looked as if a record waited for it,
    # for good, and held every busy partition at its share.
    states, _ = owned(3)
    busy, quiet, _ = states
    fill(busy, 0, 150, log_end=10_000)
    fill(quiet, 0, 10, log_end=11)  # offset 10 is the marker
    shares = BufferShares(lambda: states, Lookups())  # type: ignore[arg-type]
    assert shares.check(spent=False) == [busy]  # a record may be on its way: held meanwhile
    clock = [time.monotonic() + SETTLE_S]
    monkeypatch.setattr("jetkafka.channel._shares.time.monotonic", lambda: clock[0])
    assert shares.check(spent=False) == [] and not shares.others_want_room
    fill(quiet, 11, 1, log_end=13)  # a real record after all: it wants room again
    assert shares.check(spent=False) == [] and shares.others_want_room


def test_a_partition_that_cannot_drain_gives_back_what_it_borrowed_once_the_budget_is_spent() -> None:
    # Before anyone is known to want room: it could not use the room anyway.
    states, budget = owned(3)
    paused = states[0]
    fill(paused, 0, 300, log_end=300)
    paused.paused = True
    lookups = Lookups()
    shares = BufferShares(lambda: states, lookups)  # type: ignore[arg-type]
    assert not shares.check(spent=False)  # room left: nothing to give back
    assert budget.spent() and shares.check(spent=True) == [paused]
    assert paused.buffer.buffered == 100 and not budget.spent() and lookups.asked == []

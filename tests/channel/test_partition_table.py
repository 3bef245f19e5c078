"""The partition table: one owner of the leased partitions and the pauses."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._partition import PartitionState, Turn
from jetkafka.channel._partition_table import PartitionTable


def leased(topic: str, partition: int, budget: BufferBudget) -> PartitionState:
    lease = SimpleNamespace(topic=topic, partition=partition, key=(topic, partition), committed=None)
    return PartitionState(lease, 0, 100, 1 << 20, budget)  # type: ignore[arg-type]


def test_a_partition_taken_again_replaces_its_old_state_and_only_the_current_state_leaves() -> None:
    table, budget = PartitionTable(), BufferBudget(100, 1 << 20)
    old = leased("t", 0, budget)
    assert table.adopt(old, budget, lambda s: None) is None
    new = leased("t", 0, budget)
    assert table.adopt(new, budget, lambda s: None) is old
    assert not table.drop(old, budget)  # the old lease's worker ends after the new one began
    assert table.get(("t", 0)) is new
    assert table.drop(new, budget)
    assert table.keys() == []


class CountingBudget(BufferBudget):
    def __init__(self) -> None:
        super().__init__(100, 1 << 20)
        self.counts: list[int] = []

    def set_partitions(self, count: int) -> None:
        self.counts.append(count)
        super().set_partitions(count)


def test_the_budget_follows_the_number_of_partitions_in_the_table() -> None:
    table, budget = PartitionTable(), CountingBudget()
    states = [leased("t", p, budget) for p in range(3)]
    for state in states:
        table.adopt(state, budget, lambda s: None)
    table.drop(states[0], budget)
    table.drop(states[0], budget)  # gone already: the count stays
    assert budget.counts == [1, 2, 3, 2]


def test_a_partition_adopted_while_paused_is_paused_under_the_tables_lock() -> None:
    table, budget = PartitionTable(), BufferBudget(100, 1 << 20)
    keys, states = table.mark_paused("t", 1)  # not leased yet
    assert (keys, states) == ([("t", 1)], [])
    seen: list[tuple[PartitionState, bool]] = []

    def pause(state: PartitionState) -> None:
        free: list[bool] = []

        def try_lock() -> None:  # another thread: the condition's lock is re-entrant
            free.append(table.cond.acquire(blocking=False))
            if free[0]:
                table.cond.release()

        t = threading.Thread(target=try_lock)
        t.start()
        t.join()
        seen.append((state, not free[0]))

    one, two = leased("t", 1, budget), leased("t", 2, budget)
    table.adopt(one, budget, pause)
    table.adopt(two, budget, pause)
    assert seen == [(one, True)]


def test_resuming_a_topic_clears_the_pauses_of_its_partitions_leased_or_not() -> None:
    table, budget = PartitionTable(), BufferBudget(100, 1 << 20)
    table.adopt(leased("t", 0, budget), budget, lambda s: None)
    table.mark_paused("t", 0)
    table.mark_paused("t", 5)
    table.mark_paused("u", 0)
    keys, states = table.mark_resumed("t", None)
    assert keys == [("t", 0)] and [s.key for s in states] == [("t", 0)]
    assert not table.is_paused(("t", 5)) and table.is_paused(("u", 0))


def test_a_pause_of_all_covers_partitions_taken_later_until_resumed() -> None:
    table = PartitionTable()
    table.mark_paused(None, None)
    assert table.paused_all and table.is_paused(("any", 3))
    table.mark_resumed(None, None)
    assert not table.paused_all and not table.is_paused(("any", 3))


def test_waiting_for_the_table_to_empty_wakes_when_the_last_partition_leaves() -> None:
    table, budget = PartitionTable(), BufferBudget(100, 1 << 20)
    state = leased("t", 0, budget)
    table.adopt(state, budget, lambda s: None)
    threading.Timer(0.1, table.drop, (state, budget)).start()
    started = time.monotonic()
    assert table.wait_empty(started + 5) == []
    assert time.monotonic() - started < 2
    table.adopt(leased("t", 1, budget), budget, lambda s: None)
    assert table.wait_empty(time.monotonic() + 0.05) == [("t", 1)]


def test_states_of_an_ended_start_hold_back_a_new_lease_until_handed_over_or_out_of_hand() -> None:
    table, budget = PartitionTable(), BufferBudget(100, 1 << 20)
    kept, idle = leased("t", 0, budget), leased("t", 1, budget)
    for state in (kept, idle):
        table.adopt(state, budget, lambda s: None)
    kept.turn = Turn.IN_HAND  # a call outlasted the start's end
    assert table.hold_over() == [kept, idle]
    assert table.hold_over() == []  # held over once: a later start's end does not take them again
    # Held over: still leased (its owner node is kept), and no new lease may start on it.
    assert table.keys() == [("t", 0), ("t", 1)] and table.held_over("t") == {0, 1}
    assert table.in_earlier_start(("t", 0)) and table.in_earlier_start(("t", 1))
    idle.remove()
    assert table.drop(idle, budget)  # handed over by its start's worker
    assert not table.in_earlier_start(("t", 1)) and table.held_over("t") == {0}
    # Given up (a shutdown): no longer leased, and a new lease waits only while its call runs.
    table.give_up([kept], budget)
    assert table.keys() == [] and table.held_over("t") == set()
    assert table.wait_gone([kept, idle], 0.0)
    assert table.in_earlier_start(("t", 0))
    kept.turn = Turn.IDLE  # the call returned; its closed queue runs nothing more of it
    assert not table.in_earlier_start(("t", 0))
    new = leased("t", 0, budget)
    assert table.adopt(new, budget, lambda s: None) is None
    assert not table.drop(kept, budget) and table.get(("t", 0)) is new


def test_a_state_given_up_out_of_hand_is_not_kept_apart() -> None:
    table, budget = PartitionTable(), BufferBudget(100, 1 << 20)
    queued = leased("t", 0, budget)
    table.adopt(queued, budget, lambda s: None)
    queued.turn = Turn.QUEUED  # waiting for a worker when its start ended: no call running
    table.give_up(table.hold_over(), budget)
    assert table.keys() == [] and not table.in_earlier_start(("t", 0))

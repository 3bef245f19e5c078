"""The work queue under ``channel.ordering: key | none``: tasks beside partitions' turns."""

from __future__ import annotations

import time
from types import SimpleNamespace

from confluent_kafka import Message

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._partition import PartitionState
from jetkafka.channel._work_queue import PartitionQueue
from jetkafka.ordering._key_scheduler import KeyScheduler
from jetkafka.ordering._lanes import LaneTask


def keyed(partition: int, budget: BufferBudget, records: int = 10) -> PartitionState:
    lease = SimpleNamespace(topic="t", partition=partition, key=("t", partition), committed=None)
    scheduler = KeyScheduler("key", 100, 0)
    state = PartitionState(lease, 0, 1000, 1 << 20, budget, scheduler, 4)  # type: ignore[arg-type]
    state.buffer.append(
        [Message(topic="t", partition=partition, offset=o, key=f"k{o % 2}".encode(), value=b"v") for o in range(records)]
    )
    return state


def handed_out(state: PartitionState) -> list[LaneTask]:
    """What a turn does: take the buffer and hand batches out (tracked, as the runner does)."""
    assert state.scheduler is not None
    batch, _ = state.buffer.take_batch(100, 1 << 20)
    state.scheduler.take(batch)
    tasks = []
    for messages, keys in state.scheduler.hand_out(state.parallelism, 100):
        task = LaneTask(state, messages, keys, state.scheduler.generation)
        state.scheduler.track(task)
        tasks.append(task)
    return tasks


def test_turns_go_before_tasks_and_a_task_waits_for_its_back_off() -> None:
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    a, b = keyed(0, budget), keyed(1, budget)
    first, second = handed_out(a)
    assert {first.keys, second.keys} == {frozenset({b"k0"}), frozenset({b"k1"})}
    second.not_before = time.monotonic() + 30  # an error back-off
    queue.submit(second)
    queue.submit(first)
    queue.offer(b)
    assert queue.take(timeout=1) is b  # b's turn first: it commits and hands out more
    assert queue.take(timeout=1) is first
    assert queue.take(timeout=0.2) is None  # the other one waits out its back-off


def test_wake_runs_a_task_in_back_off_at_once_and_only_once() -> None:
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    a = keyed(0, budget)
    task, _ = handed_out(a)
    task.not_before = time.monotonic() + 0.3
    queue.submit(task)
    queue.wake([task])
    assert queue.take(timeout=1) is task
    time.sleep(0.4)  # the back-off's own end comes: its entry is stale and delivers nothing
    assert queue.take(timeout=0.2) is None


def test_a_partition_holding_back_is_due_only_for_news_or_a_parked_batch() -> None:
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    a = keyed(0, budget)
    assert a.scheduler is not None
    task, _ = handed_out(a)
    a.scheduler.take_news()
    a.release_reason = "shutdown"
    queue.offer(a)
    assert queue.take(timeout=0.2) is None  # its batches run: nothing to do until one ends
    task.not_before = time.monotonic() + 30
    queue.submit(task)  # one batch waits out a back-off: the turn must wake it
    queue.offer(a)
    assert queue.take(timeout=1) is a


def test_a_newer_state_waits_while_the_older_ones_batches_run() -> None:
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    old = keyed(0, budget)
    assert old.scheduler is not None
    queue.offer(old)
    assert queue.take(timeout=1) is old
    tasks = handed_out(old)  # its turn hands its batches out
    old.scheduler.take_news()
    old.lost_reason = "ZooKeeper session expired"
    queue.give_back(old)  # holding back with batches in flight and no news: not queued again
    new = keyed(0, budget)
    queue.offer(new)
    assert queue.take(timeout=0.2) is None  # the old state's turn is over, yet new waits for its batches
    for task in tasks:
        old.scheduler.end(task, task.keys, [], task.generation)
    queue.offer(old)  # the last end offers it: its loss is handled first
    assert queue.take(timeout=1) is old
    old.buffer.close()  # what its turn does after the loss: the partition leaves the channel
    queue.give_back(old)
    assert queue.take(timeout=1) is new

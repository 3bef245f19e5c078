"""The partition queue: a worker keeps its partition only while no other one waits."""

from __future__ import annotations

import time
from types import SimpleNamespace

from confluent_kafka import Message

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._partition import PartitionState
from jetkafka.channel._work_queue import PartitionQueue


def with_backlog(partition: int, budget: BufferBudget) -> PartitionState:
    lease = SimpleNamespace(topic="t", partition=partition, key=("t", partition), committed=None)
    state = PartitionState(lease, 0, 1000, 1 << 20, budget)  # type: ignore[arg-type]
    state.buffer.append([Message(topic="t", partition=partition, offset=o, value=b"v") for o in range(100)])
    return state


def test_a_worker_keeps_its_partition_until_another_one_is_queued() -> None:
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    a, b = with_backlog(0, budget), with_backlog(1, budget)
    queue.offer(a)
    assert queue.take(timeout=1) is a
    assert queue.keep(a)  # a backlog and nobody waiting
    queue.offer(b)
    assert not queue.keep(a)  # b waits for a worker: a goes back to the queue
    queue.give_back(a)
    assert queue.take(timeout=1) is b


def test_a_partition_whose_wait_ran_out_counts_as_waiting() -> None:
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    a, b = with_backlog(0, budget), with_backlog(1, budget)
    b.not_before = time.monotonic() + 0.5  # a wait(500 ms) response or an error back-off
    queue.offer(b)
    queue.offer(a)
    assert queue.take(timeout=1) is a
    assert queue.keep(a)  # b's time has not come
    time.sleep(0.6)
    assert not queue.keep(a)  # it has now, and no other worker took it off the timer
    queue.give_back(a)
    assert queue.take(timeout=1) is b


def test_a_partition_without_work_or_a_closed_queue_is_given_back() -> None:
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    a = with_backlog(0, budget)
    queue.offer(a)
    assert queue.take(timeout=1) is a
    a.buffer.take_batch(1000, 1 << 20)
    assert not queue.keep(a)  # nothing buffered
    a.buffer.append([Message(topic="t", partition=0, offset=100, value=b"v")])
    assert queue.keep(a)
    queue.close()
    assert not queue.keep(a)


def test_a_partition_taken_again_waits_for_the_old_leases_turn_to_end() -> None:
    """Lost and taken again while a worker still runs a batch of the old lease: the new lease's
    state must not reach a second worker before that turn ends (one thread per partition)."""
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    old = with_backlog(0, budget)
    queue.offer(old)
    assert queue.take(timeout=1) is old  # a worker is in the old lease's batch
    old.lost_reason = "session expired"
    new = with_backlog(0, budget)  # the same partition, taken again
    queue.offer(new)
    assert queue.take(timeout=0.3) is None  # a second worker finds nothing to do
    old.remove()
    queue.give_back(old)  # the loss handled, the old turn over
    assert queue.take(timeout=1) is new


def test_a_partition_taken_again_waits_while_the_old_lease_is_queued_or_goes_back_with_work() -> None:
    """The old lease's state still queued (its loss waiting for a free worker), or given back
    with its loss still to handle: the new state reaches no worker until the old one is done."""
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    old = with_backlog(0, budget)
    old.lost_reason = "session expired"
    queue.offer(old)  # queued, every worker busy
    new = with_backlog(0, budget)
    queue.offer(new)
    assert queue.take(timeout=1) is old
    queue.give_back(old)  # its turn ended before it handled the loss: queued again
    assert queue.take(timeout=1) is old
    assert queue.take(timeout=0.3) is None  # not the new one meanwhile
    old.remove()
    queue.give_back(old)
    assert queue.take(timeout=1) is new

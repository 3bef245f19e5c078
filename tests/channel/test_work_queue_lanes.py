"""The work queue under ``channel.ordering: key | none``: tasks beside partitions' turns."""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

from confluent_kafka import Message

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._failures import FailurePolicy
from jetkafka.channel._partition import PartitionState
from jetkafka.channel._stats import ChannelStats
from jetkafka.channel._work_queue import PartitionQueue
from jetkafka.config import parse_config
from jetkafka.config._schema import ErrorPolicyConfig
from jetkafka.ordering._key_scheduler import KeyScheduler
from jetkafka.ordering._lanes import LaneTask
from tests.support.channels import channel_config


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


def test_a_new_on_error_runs_a_batch_in_back_off_once_not_again_once_it_was_taken() -> None:
    """A hot deploy changing ``on_error`` wakes the batches the old policy put in a back-off;
    one a worker already took (woken by a pause, or its back-off over) is not queued twice."""
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    config = parse_config(channel_config("127.0.0.1:1", {"bootstrap.servers": "127.0.0.1:1"}, ["t"])).channel
    policy = FailurePolicy(config, ChannelStats(), None, queue.offer)
    a = keyed(0, budget)
    parked, other = handed_out(a)
    for task in (parked, other):
        task.error_attempts = 1
        policy.failed(task, task.batch, ValueError("down"))
        assert task.not_before > time.monotonic()
        queue.submit(task)
    queue.wake([parked])  # the partition is paused: the batch gives its records back at once
    assert queue.take(timeout=1) is parked  # in a worker's hands now
    policy.reconfigure(dataclasses.replace(config, on_error=ErrorPolicyConfig(mode="skip")))
    assert queue.take(timeout=1) is other  # still parked: woken by the new policy
    assert queue.take(timeout=0.3) is None  # and the one in hand is not queued a second time


def test_a_closed_queue_abandons_its_tasks_so_their_partition_is_not_busy() -> None:
    """A shutdown giving a partition up closes its start's queue: batches queued, parked or
    ending after that are out of flight, or a later start could never take the partition."""
    budget = BufferBudget(1000, 1 << 20)
    queue = PartitionQueue(idle_ms=0)
    a = keyed(0, budget)
    assert a.scheduler is not None
    queued, parked = handed_out(a)
    parked.not_before = time.monotonic() + 30
    queue.submit(parked)
    queue.submit(queued)
    assert a.lanes_busy()
    queue.close()
    assert not a.lanes_busy() and a.scheduler.tracked() == []
    assert queued.closed and parked.closed
    assert a.scheduler.records_in_flight == 0  # what they held waits, unrun, for the next owner
    (late,) = handed_out_again(a)
    queue.submit(late)  # an asynchronous batch's end arriving after the close
    assert not a.lanes_busy() and late.closed


def handed_out_again(state: PartitionState) -> list[LaneTask]:
    """The records the abandoned batches held are waiting for a new owner; hand one batch out."""
    assert state.scheduler is not None
    state.scheduler.take([Message(topic="t", partition=state.partition, offset=100, key=b"k9", value=b"v")])
    out = []
    for messages, keys in state.scheduler.hand_out(1, 100):
        task = LaneTask(state, messages, keys, state.scheduler.generation)
        state.scheduler.track(task)
        out.append(task)
    return out

"""Asynchronous fenced commits (OffsetStore.commit_async) on a real ZooKeeper."""

from __future__ import annotations

import queue
import threading

from kazoo.client import KazooClient

from jetkafka.coordination.offsets import CommitUncertain, OffsetStore
from jetkafka.coordination.ownership import Lease
from jetkafka.errors import CommitFenced
from tests.support.coordination import PATHS, member
from tests.support.zk_faults import expire_session


def commit_async(store: OffsetStore, lease: Lease, offset: int, timeout: float = 10.0) -> Exception | None:
    answers: queue.SimpleQueue[Exception | None] = queue.SimpleQueue()
    store.commit_async(lease, offset, answers.put)
    return answers.get(timeout=timeout)


def test_async_commit_lands_and_updates_the_lease(clients: tuple[KazooClient, KazooClient]) -> None:
    own, store = member(clients[0], "a")
    lease = own.take("t", 0)
    assert lease is not None
    before = lease.offset_version
    assert commit_async(store, lease, 10) is None
    assert (lease.committed, lease.offset_version, lease.flight) == (10, before + 1, 0)
    assert store.read("t", 0) == 10
    store.commit(lease, 20)  # a synchronous commit after it writes at the version it left
    assert store.read("t", 0) == 20


def test_async_commit_of_a_replaced_owner_is_refused(clients: tuple[KazooClient, KazooClient]) -> None:
    (own_a, store_a), (own_b, store_b) = member(clients[0], "a"), member(clients[1], "b")
    lease = own_a.take("t", 1)
    assert lease is not None
    store_a.commit(lease, 5)
    expire_session(clients[0])
    taken = own_b.take("t", 1)
    assert taken is not None and taken.committed == 5
    error = commit_async(store_a, lease, 99)
    assert isinstance(error, CommitFenced)
    assert store_b.read("t", 1) == 5


def test_lost_reply_is_reported_uncertain_and_the_synchronous_retry_reconciles(
    clients: tuple[KazooClient, KazooClient],
) -> None:
    own, store = member(clients[0], "a")
    lease = own.take("t", 2)
    assert lease is not None
    # What a commit whose reply was lost leaves behind: our value landed, the lease is a version behind.
    clients[0].set(PATHS.offset("t", 2), b"7", version=lease.offset_version)
    error = commit_async(store, lease, 8)
    assert isinstance(error, CommitUncertain)
    store.commit(lease, 8)  # the owner node is still this session's: the version is adopted
    assert store.read("t", 2) == 8


def test_writes_under_the_lease_wait_for_the_commit_in_flight(clients: tuple[KazooClient, KazooClient]) -> None:
    own, store = member(clients[0], "a")
    lease = own.take("t", 3)
    assert lease is not None
    answered = threading.Event()
    order: list[str] = []

    def done(error: Exception | None) -> None:
        assert error is None
        order.append("async answered")
        answered.set()

    # Hold the completion thread up, so the answer to the async commit cannot be applied yet.
    gate = threading.Event()
    clients[0].handler.completion_queue.put(gate.wait)
    store.commit_async(lease, 30, done)
    writer = threading.Thread(target=lambda: (store.commit(lease, 31), order.append("sync committed")))
    writer.start()
    writer.join(0.5)
    assert writer.is_alive(), "a synchronous commit went ahead of the answer to the one in flight"
    gate.set()
    writer.join(10)
    assert answered.is_set() and order == ["async answered", "sync committed"]
    assert store.read("t", 3) == 31
    own.release(lease)  # fenced by the offset version: only works if the lease kept up with both commits
    assert own.owners("t") == {}

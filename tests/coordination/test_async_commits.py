"""Asynchronous fenced commits (OffsetStore.commit_async) on a real ZooKeeper."""

from __future__ import annotations

import queue
import threading
import time

import pytest
from kazoo.client import KazooClient

from jetkafka.coordination._offsets import CommitUncertain, OffsetStore
from jetkafka.coordination._ownership import Lease
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


def test_a_multi_partition_commit_never_blocks_the_answers_to_pipelined_commits(
    clients: tuple[KazooClient, KazooClient], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Partition A's commit is answered on kazoo's completion thread, which at once sends A's
    next offset (as the commit pipeline does) while a multi-partition commit of A and B waits
    for B's commit in flight, whose answer is queued behind A's on that same thread."""
    monkeypatch.setattr(Lease, "SETTLE_TIMEOUT_S", 10.0)
    own, store = member(clients[0], "a")
    lease_a, lease_b = own.take("t", 4), own.take("t", 5)
    assert lease_a is not None and lease_b is not None
    many_started = threading.Event()
    next_sent: queue.SimpleQueue[Exception | None] = queue.SimpleQueue()

    def a_answered(error: Exception | None) -> None:
        assert error is None
        # Let the multi-partition commit get as far as it can (with the old lock order: it
        # holds A's lock now and waits for B), then send A's next offset from this thread.
        many_started.wait(10)
        deadline = time.monotonic() + 1.0
        while not lease_a.lock.locked() and time.monotonic() < deadline:
            time.sleep(0.005)
        store.commit_async(lease_a, 2, next_sent.put)

    gate = threading.Event()
    clients[0].handler.completion_queue.put(gate.wait)  # both answers queue up behind this
    store.commit_async(lease_a, 1, a_answered)
    store.commit_async(lease_b, 1, lambda error: None)
    took: list[float] = []
    failed: list[Exception] = []

    def commit_both() -> None:
        started = time.monotonic()
        many_started.set()
        try:
            store.commit_many({("t", 4): (lease_a, 3), ("t", 5): (lease_b, 3)})
        except Exception as exc:  # noqa: BLE001 - the test checks what was raised
            failed.append(exc)
        took.append(time.monotonic() - started)

    many = threading.Thread(target=commit_both)
    many.start()
    gate.set()
    many.join(30)
    assert took, "the multi-partition commit did not finish"
    assert not failed, f"the multi-partition commit failed after {took[0]:.1f} s: {failed[0]!r}"
    assert next_sent.get(timeout=10) is None
    assert took[0] < 5.0, f"the multi-partition commit waited {took[0]:.1f} s for an answer held up behind it"
    assert not [r for r in caplog.records if "no answer to an asynchronous commit" in r.getMessage()]
    # Both leases kept up with every commit that landed: each writes again at the right version.
    store.commit(lease_a, 10)
    store.commit(lease_b, 10)
    assert (store.read("t", 4), store.read("t", 5)) == (10, 10)

"""A group membership on a real ZooKeeper, driven by a stand-in for the channel.

The stand-in (:class:`Holder`) does what a channel does with the membership's calls, minus
Kafka: it adopts the partitions it is given (or fails to, as told) and releases what it is
asked to release at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from jetkafka.config import parse_config
from jetkafka.coordination._membership import GroupMembership
from jetkafka.coordination._ownership import Lease
from jetkafka.coordination._process_session import ProcessSession
from tests.support.channels import wait_until
from tests.support.group_watch import owners, started_client, stop_client

Key = tuple[str, int]
PARTITIONS = 4


class Holder:
    """Adopts every lease given, except while ``refuse`` says otherwise; releases at once."""

    def __init__(self, count: int = PARTITIONS) -> None:
        self.count = count
        self.membership: GroupMembership | None = None
        self.adopted: dict[Key, Lease] = {}
        self.lock = threading.Lock()
        # Given the leases, adopts what it returns, then raises: a channel failing half way.
        self.refuse: Callable[[list[Lease]], list[Lease]] | None = None

    def partition_counts(self, topics: tuple[str, ...], missing_ok: bool = False) -> Mapping[str, int]:
        return {t: self.count for t in topics}

    def partitions_taken(self, leases: list[Lease]) -> None:
        assert self.membership is not None
        keep = leases if self.refuse is None else self.refuse(leases)
        for lease in keep:
            with self.lock:
                self.adopted[lease.key] = lease
            self.membership.adopted(lease)  # the channel tells the membership what it started
        if len(keep) < len(leases):
            raise RuntimeError("channel failed half way (injected)")

    def release_requested(self, keys: list[Key], reason: str) -> None:
        assert self.membership is not None
        for key in keys:
            with self.lock:
                lease = self.adopted.pop(key, None)
            self.membership.finish_release(key, lease)

    def partitions_lost(self, keys: list[Key], reason: str) -> None:
        with self.lock:
            for key in keys:
                self.adopted.pop(key, None)

    def commits_suspended(self, suspended: bool) -> None:
        pass

    def held_elsewhere(self, topic: str) -> set[int]:
        return set()

    def keys(self) -> list[Key]:
        with self.lock:
            return sorted(self.adopted)


@pytest.fixture
def process_session(zk_connect: str) -> Iterator[ProcessSession]:
    session = ProcessSession(parse_config(config_for(zk_connect)).zookeeper)
    session.start()
    yield session
    session.stop()


def config_for(zk_connect: str, **channel: Any) -> dict[str, Any]:
    return {
        "zookeeper": {"connect": zk_connect, "session_timeout_s": 6},
        "kafka": {"bootstrap.servers": "unused:9092"},
        "channel": {"group": "g", "topics": ["t"], "rebalance_delay_ms": 20, "rebalance_interval_s": 3600, **channel},
    }


def joined(
    process_session: ProcessSession, zk_connect: str, holder: Holder, consumer_id: str, **channel: Any
) -> GroupMembership:
    config = parse_config(config_for(zk_connect, **channel)).channel
    membership = GroupMembership(process_session, config, holder, consumer_id)
    holder.membership = membership
    membership.start()
    return membership


def test_leases_the_channel_did_not_adopt_are_given_up_and_taken_again(
    zk_connect: str, process_session: ProcessSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    holder = Holder()
    failures = [0]

    def adopt_only_the_first(leases: list[Lease]) -> list[Lease]:
        failures[0] += 1
        holder.refuse = None  # works from now on
        return leases[:1]

    holder.refuse = adopt_only_the_first
    observer = started_client(zk_connect)
    membership = joined(process_session, zk_connect, holder, "a")
    try:
        wait_until(lambda: holder.keys() == [("t", p) for p in range(PARTITIONS)], 15, "every partition adopted")
        assert owners(observer, "t") == {p: "a" for p in range(PARTITIONS)}
    finally:
        membership.stop()
        stop_client(observer)
    assert failures == [1]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert "could not start t[1, 2, 3]" in errors[0] and "RuntimeError" in errors[0] and "taken again" in errors[0]


def test_a_channel_that_keeps_failing_is_retried_with_back_off_and_others_may_take_over(
    zk_connect: str, process_session: ProcessSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    stubborn = Holder()
    stubborn.refuse = lambda leases: []  # never starts anything
    observer = started_client(zk_connect)
    a = joined(process_session, zk_connect, stubborn, "a")
    other_session = ProcessSession(parse_config(config_for(zk_connect)).zookeeper)
    other_session.start()
    healthy = Holder()
    b: GroupMembership | None = None
    try:
        time.sleep(6.0)
        attempts = [r for r in caplog.records if "could not start" in r.getMessage()]
        # Back-off 1 s, 2 s, 4 s: attempts at about 0, 1 and 3 s (a fourth if the machine is slow).
        assert 2 <= len(attempts) <= 4, [f"{r.created:.2f}" for r in attempts]
        assert owners(observer, "t") == {}  # given up each time: free for anybody
        b = joined(other_session, zk_connect, healthy, "b")
        a.leave_group()
        wait_until(lambda: len(healthy.keys()) == PARTITIONS, 10, "b takes every partition a could not start")
    finally:
        if b is not None:
            b.stop()
        a.stop()
        other_session.stop()
        stop_client(observer)


def test_an_owner_node_of_this_session_without_a_lease_is_deleted_and_taken_properly(
    zk_connect: str, process_session: ProcessSession, caplog: pytest.LogCaptureFixture
) -> None:
    """What a take whose answer was lost with the connection leaves behind: an owner node
    naming this consumer, created by its session, that no lease stands for."""
    caplog.set_level(logging.WARNING)
    process_session.client.create("/consumers/g/owners/t/2", b"a", ephemeral=True, makepath=True)
    holder = Holder()
    observer = started_client(zk_connect)
    membership = joined(process_session, zk_connect, holder, "a")
    try:
        wait_until(lambda: holder.keys() == [("t", p) for p in range(PARTITIONS)], 10, "every partition adopted")
        assert membership.lease(("t", 2)) is holder.adopted[("t", 2)]
        assert owners(observer, "t") == {p: "a" for p in range(PARTITIONS)}
    finally:
        membership.stop()
        stop_client(observer)
    assert [r for r in caplog.records if "without a lease" in r.getMessage() and "[2]" in r.getMessage()]


def test_partitions_taken_as_the_session_expires_are_not_held_on_a_dead_session(
    zk_connect: str, process_session: ProcessSession
) -> None:
    """Injected: the session expires for real right after a rebalance's take transactions
    succeeded, before their leases are recorded (the expiry's notice clears the leases first).
    Asserted: no lease of the dead session is handed to the channel or kept; the new session
    takes every partition again and its owner nodes exist."""
    from tests.support.zk_faults import expire_session

    holder = Holder()
    handed: list[Lease] = []
    adopt = holder.partitions_taken

    def partitions_taken(leases: list[Lease]) -> None:
        handed.extend(leases)
        adopt(leases)

    holder.partitions_taken = partitions_taken  # type: ignore[method-assign]
    observer = started_client(zk_connect)
    expired = threading.Event()
    dead: list[int] = []

    def start() -> GroupMembership:
        membership = GroupMembership(process_session, parse_config(config_for(zk_connect)).channel, holder, "a")
        holder.membership = membership
        take_many = membership.ownership.take_many

        def take_then_expire(topic: str, partitions: list[int]) -> list[Lease]:
            leases = take_many(topic, partitions)
            if not expired.is_set():
                dead.append(process_session.client.client_id[0])
                expired.set()
                expire_session(process_session.client)  # returns once the client has a new session
            return leases

        membership.ownership.take_many = take_then_expire  # type: ignore[method-assign]
        membership.start()
        return membership

    membership = start()
    try:
        wait_until(expired.is_set, 15, "the injected expiry")
        wait_until(lambda: owners(observer, "t") == {p: "a" for p in range(PARTITIONS)}, 20, "owner nodes of the new session")
        session = process_session.client.client_id[0]
        wait_until(
            lambda: len(holder.keys()) == PARTITIONS
            and all(lease.session_id == session for lease in holder.adopted.values()),
            20,
            "every partition adopted under the new session",
        )
        for p in range(PARTITIONS):
            stat = observer.exists(f"/consumers/g/owners/t/{p}")
            assert stat is not None and stat.ephemeralOwner == session
            lease = membership.lease(("t", p))
            assert lease is not None and lease.session_id == session
    finally:
        membership.stop()
        stop_client(observer)
    stale = [lease.key for lease in handed if lease.session_id in dead]
    assert not stale, f"leases of the expired session handed to the channel: {stale}"

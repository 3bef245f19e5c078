"""Fenced ownership and commits on a real ZooKeeper, with real session expiry."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from jetkafka.config import ZooKeeperAuth, ZooKeeperConfig
from jetkafka.coordination._session import build_client, start_client
from jetkafka.errors import CommitFenced
from tests.support.coordination import PATHS, member
from tests.support.zk_faults import expire_session


def test_only_one_consumer_takes_a_partition(clients: tuple[KazooClient, KazooClient]) -> None:
    (own_a, _), (own_b, _) = member(clients[0], "a"), member(clients[1], "b")
    assert own_a.take("t", 0) is not None
    assert own_b.take("t", 0) is None
    assert own_b.owners("t") == {0: "a"}


def test_new_owner_starts_from_last_commit(clients: tuple[KazooClient, KazooClient]) -> None:
    (own_a, off_a), (own_b, _) = member(clients[0], "a"), member(clients[1], "b")
    lease = own_a.take("t", 3)
    assert lease is not None and lease.committed is None
    off_a.commit(lease, 41)
    off_a.commit(lease, 42)
    own_a.release(lease)
    taken = own_b.take("t", 3)
    assert taken is not None and taken.committed == 42


def test_expired_owner_cannot_commit_even_before_anyone_takes_over(
    clients: tuple[KazooClient, KazooClient],
) -> None:
    a, _ = clients
    own_a, off_a = member(a, "a")
    lease = own_a.take("t", 0)
    assert lease is not None
    off_a.commit(lease, 10)
    expire_session(a)
    with pytest.raises(CommitFenced):
        off_a.commit(lease, 20)
    assert off_a.read("t", 0) == 10


def test_zombie_commit_after_take_over_is_refused(clients: tuple[KazooClient, KazooClient]) -> None:
    a, b = clients
    (own_a, off_a), (own_b, off_b) = member(a, "a"), member(b, "b")
    lease_a = own_a.take("t", 0)
    assert lease_a is not None
    off_a.commit(lease_a, 10)
    expire_session(a)
    lease_b = own_b.take("t", 0)
    assert lease_b is not None and lease_b.committed == 10
    # The zombie re-creates nothing and its conditional write fails on the bumped version,
    # even though "a" now has a live session again.
    with pytest.raises(CommitFenced):
        off_a.commit(lease_a, 99)
    off_b.commit(lease_b, 11)
    assert off_b.read("t", 0) == 11


def test_released_partition_refuses_the_old_owners_commit(clients: tuple[KazooClient, KazooClient]) -> None:
    own_a, off_a = member(clients[0], "a")
    lease = own_a.take("t", 1)
    assert lease is not None
    own_a.release(lease)
    with pytest.raises(CommitFenced):
        off_a.commit(lease, 5)


def test_multi_partition_commit_is_all_or_nothing(clients: tuple[KazooClient, KazooClient]) -> None:
    (own_a, off_a), (own_b, _) = member(clients[0], "a"), member(clients[1], "b")
    l0, l1 = own_a.take("t", 0), own_a.take("t", 1)
    assert l0 is not None and l1 is not None
    off_a.commit_many({("t", 0): (l0, 5), ("t", 1): (l1, 7)})
    assert (off_a.read("t", 0), off_a.read("t", 1)) == (5, 7)
    own_a.release(l1)
    assert own_b.take("t", 1) is not None
    with pytest.raises(CommitFenced) as info:
        off_a.commit_many({("t", 0): (l0, 6), ("t", 1): (l1, 8)})
    assert info.value.partition == 1
    assert (off_a.read("t", 0), off_a.read("t", 1)) == (5, 7)


def test_digest_auth_protects_every_node(zk_connect: str) -> None:
    secure = ZooKeeperConfig(connect=zk_connect, auth=ZooKeeperAuth(credential="app:s3cret"))
    owner = build_client(secure)
    start_client(owner, secure)
    anonymous = KazooClient(hosts=zk_connect)
    anonymous.start(timeout=10)
    wrong = build_client(ZooKeeperConfig(connect=zk_connect, auth=ZooKeeperAuth(credential="app:guess")))
    start_client(wrong, ZooKeeperConfig(connect=zk_connect))
    try:
        ownership, offsets = member(owner, "a")
        lease = ownership.take("t", 0)
        assert lease is not None
        offsets.commit(lease, 7)
        for intruder in (anonymous, wrong):
            with pytest.raises(NoAuthError):
                intruder.get(PATHS.offset("t", 0))
            with pytest.raises(NoAuthError):
                intruder.set(PATHS.offset("t", 0), b"0")
            with pytest.raises(NoAuthError):
                intruder.delete(PATHS.owner("t", 0))
        assert offsets.read("t", 0) == 7
    finally:
        for c in (owner, anonymous, wrong):
            c.stop()
            c.close()


def test_a_commit_whose_reply_was_lost_does_not_orphan_the_partition(
    clients: tuple[KazooClient, KazooClient],
) -> None:
    a, b = clients
    (own_a, off_a), (own_b, off_b) = member(a, "a"), member(b, "b")
    lease = own_a.take("t", 0)
    assert lease is not None
    off_a.commit(lease, 10)
    # The commit of 11 lands but its reply is lost: the lease still holds the old version.
    stale_version = lease.offset_version
    off_a.commit(lease, 11)
    lease.offset_version = stale_version
    off_a.commit(lease, 12)  # adopted, not refused: the owner node is still this lease's
    assert off_a.read("t", 0) == 12
    # A real take-over is still fenced, reconciliation or not.
    own_a.release(lease)
    assert own_b.take("t", 0) is not None
    with pytest.raises(CommitFenced):
        off_a.commit(lease, 13)
    assert off_b.read("t", 0) == 12


def test_an_expired_lease_is_not_reconciled(clients: tuple[KazooClient, KazooClient]) -> None:
    a, _ = clients
    own_a, off_a = member(a, "a")
    lease = own_a.take("t", 0)
    assert lease is not None
    off_a.commit(lease, 10)
    expire_session(a)
    # Same instance, new session, takes the partition again: the old lease stays fenced.
    again = own_a.take("t", 0)
    assert again is not None and again.session_id != lease.session_id
    with pytest.raises(CommitFenced):
        off_a.commit(lease, 99)
    assert off_a.read("t", 0) == 10


def test_a_stale_lease_cannot_release_the_new_owners_node(clients: tuple[KazooClient, KazooClient]) -> None:
    a, b = clients
    (own_a, _), (own_b, _) = member(a, "a"), member(b, "b")
    lease_a = own_a.take("t", 0)
    assert lease_a is not None
    expire_session(a)
    assert own_b.take("t", 0) is not None
    # Both owner nodes were created at version 0; only the offset check tells them apart.
    own_a.release(lease_a)
    assert own_b.owners("t") == {0: "b"}

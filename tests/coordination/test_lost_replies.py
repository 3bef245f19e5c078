"""Writes whose reply was lost, and telling this hold's owner node from a newer one.

A commit whose reply is lost leaves the lease one offset version behind the node. While the
owner node is still exactly the one this hold created (same session *and* same creating
transaction), that version can only have moved through this hold: commits and the release
adopt it. A newer hold of the same partition by the same session is a different node, and
an older hold must never act on it.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import Lease
from jetkafka.errors import CommitFenced, OffsetMoved
from tests.support.coordination import member


def landed_without_reply(store: OffsetStore, lease: Lease, offset: int) -> None:
    """Commit ``offset`` for real, then put the lease back as if the reply never came."""
    version, committed = lease.offset_version, lease.committed
    store.commit(lease, offset)
    lease.offset_version, lease.committed = version, committed


def test_release_after_a_commit_whose_reply_was_lost_deletes_the_owner_node(
    clients: tuple[KazooClient, KazooClient],
) -> None:
    (own_a, off_a), (own_b, _) = member(clients[0], "a"), member(clients[1], "b")
    lease = own_a.take("t", 0)
    assert lease is not None
    off_a.commit(lease, 10)
    landed_without_reply(off_a, lease, 11)
    released = own_a.release(lease)
    assert own_a.owners("t") == {}, "the owner node stayed: nobody else can take the partition"
    assert released is True
    taken = own_b.take("t", 0)
    assert taken is not None and taken.committed == 11


def test_multi_partition_commit_adopts_a_commit_whose_reply_was_lost(
    clients: tuple[KazooClient, KazooClient],
) -> None:
    own, store = member(clients[0], "a")
    l0, l1 = own.take("t", 0), own.take("t", 1)
    assert l0 is not None and l1 is not None
    store.commit_many({("t", 0): (l0, 5), ("t", 1): (l1, 10)})
    landed_without_reply(store, l1, 11)
    store.commit_many({("t", 0): (l0, 6), ("t", 1): (l1, 12)})
    assert (store.read("t", 0), store.read("t", 1)) == (6, 12)
    # Conditional: the commit that landed without its reply is the last one under the lease.
    landed_without_reply(store, l1, 13)
    with pytest.raises(OffsetMoved):
        store.commit_many({("t", 0): (l0, 7), ("t", 1): (l1, 14)}, expected={("t", 1): 12})
    assert (store.read("t", 0), store.read("t", 1)) == (6, 13)
    store.commit_many({("t", 0): (l0, 7), ("t", 1): (l1, 14)}, expected={("t", 1): 13})
    assert (store.read("t", 0), store.read("t", 1)) == (7, 14)


def test_an_older_hold_of_the_same_session_never_acts_on_the_newer_one(
    clients: tuple[KazooClient, KazooClient],
) -> None:
    own, store = member(clients[0], "a")
    old = own.take("t", 0)
    assert old is not None
    store.commit(old, 10)
    own.release(old)
    new = own.take("t", 0)  # the same session, a new owner node
    assert new is not None and new.session_id == old.session_id and new.owner_zxid != old.owner_zxid
    with pytest.raises(CommitFenced):
        store.commit(old, 99)
    with pytest.raises(CommitFenced):
        store.commit_many({("t", 0): (old, 99)})
    own.release(old)  # nothing of the old hold is left to release ...
    assert own.owners("t") == {0: "a"}  # ... and the new hold's node stays
    store.commit(new, 11)
    assert store.read("t", 0) == 11


def test_a_multi_partition_commit_by_a_replaced_owner_is_still_refused(
    clients: tuple[KazooClient, KazooClient],
) -> None:
    (own_a, off_a), (own_b, off_b) = member(clients[0], "a"), member(clients[1], "b")
    lease = own_a.take("t", 2)
    assert lease is not None
    off_a.commit(lease, 3)
    own_a.release(lease)
    taken = own_b.take("t", 2)
    assert taken is not None
    with pytest.raises(CommitFenced):
        off_a.commit_many({("t", 2): (lease, 50)})
    assert off_b.read("t", 2) == 3


def test_is_ours_tells_an_old_hold_from_a_new_one_of_the_same_session(
    clients: tuple[KazooClient, KazooClient],
) -> None:
    own, _ = member(clients[0], "a")
    old = own.take("t", 3)
    assert old is not None
    assert own.is_ours(old)
    own.release(old)
    new = own.take("t", 3)
    assert new is not None
    assert not own.is_ours(old) and own.is_ours(new)

"""Listing a topic's owners, re-using what an earlier listing read (the rebalancer's path).

What the listing returns must be exact, whatever it re-used: every consumer plans from it.
"""

from __future__ import annotations

from kazoo.client import KazooClient

from jetkafka.config import ZooKeeperConfig
from jetkafka.coordination._assignment import plan_dynamic
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._session import build_client, start_client
from tests.support.coordination import PATHS
from tests.support.zk_faults import expire_session


def counting_reads(client: KazooClient) -> list[str]:
    """Paths read with get_async from now on (owners() reads each owner node that way)."""
    reads: list[str] = []
    original = client.get_async

    def get_async(path: str, *args: object, **kwargs: object) -> object:
        reads.append(path)
        return original(path, *args, **kwargs)

    client.get_async = get_async  # type: ignore[method-assign]
    return reads


def test_reuse_reads_only_new_owner_nodes_and_sees_every_change(clients: tuple[KazooClient, KazooClient]) -> None:
    a, b = clients
    own_a, own_b = PartitionOwnership(a, PATHS, "a"), PartitionOwnership(b, PATHS, "b")
    own_a.prepare("t")
    for p in range(6):
        assert own_b.take("t", p) is not None
    reads = counting_reads(a)
    assert own_a.owners("t", reuse=True) == {p: "b" for p in range(6)}
    assert len(reads) == 6
    lease = own_a.take("t", 6)
    assert lease is not None
    reads.clear()
    assert own_a.owners("t", reuse=True) == {**{p: "b" for p in range(6)}, 6: "a"}
    assert reads == [PATHS.owner("t", 6)]  # only the new node
    reads.clear()
    gone = own_b.take("t", 7)  # a node that comes and goes between two listings
    assert gone is not None
    own_b.release(gone)
    listed = own_a.owners("t", reuse=True)
    assert 7 not in listed and listed[6] == "a"
    # A node came and went: the listing cannot vouch for the others, so all were read again.
    assert sorted(reads) == sorted(PATHS.owner("t", p) for p in range(7))
    assert own_a.owners("t") == listed  # a full read agrees
    reads.clear()
    assert own_a.owners("t", reuse=True) == listed
    assert reads == []  # nothing changed: nothing read


def test_our_node_taken_by_another_consumer_is_seen_even_with_reuse(
    clients: tuple[KazooClient, KazooClient],
) -> None:
    a, b = clients
    own_a, own_b = PartitionOwnership(a, PATHS, "a"), PartitionOwnership(b, PATHS, "b")
    own_a.prepare("t")
    assert own_a.take("t", 0) is not None
    assert own_a.owners("t", reuse=True) == {0: "a"}
    expire_session(a)  # our owner node goes with the session ...
    assert own_b.take("t", 0) is not None  # ... and b takes the partition before we list again
    assert own_a.owners("t", reuse=True) == {0: "b"}


def test_a_node_taken_over_between_two_listings_shows_its_new_owner(
    zk_connect: str, clients: tuple[KazooClient, KazooClient]
) -> None:
    """The chaos run's stale plan: ``a`` saw partition 10 owned by ``b``; ``b`` released it
    and ``c`` took it before ``a`` listed again. From a stale owner, each of the three
    concluded that another should take the last free partition."""
    a, b = clients
    config = ZooKeeperConfig(connect=zk_connect)
    c = build_client(config)
    start_client(c, config)
    try:
        own = {cid: PartitionOwnership(client, PATHS, cid) for cid, client in (("a", a), ("b", b), ("c", c))}
        own["a"].prepare("t")
        leases = {}
        for cid, partitions in (("a", range(5)), ("b", range(5, 11)), ("c", range(11, 15))):
            for p in partitions:
                leases[p] = own[cid].take("t", p)
                assert leases[p] is not None
        assert own["a"].owners("t", reuse=True)[10] == "b"
        own["b"].release(leases[10])
        assert own["c"].take("t", 10) is not None

        views = {cid: ownership.owners("t", reuse=True) for cid, ownership in own.items()}
        truth = own["a"].owners("t")
        assert truth[10] == "c" and 15 not in truth
        assert views["a"] == truth, "a listing re-used an owner node that was deleted and created again"
        taken = set()
        for cid, view in views.items():
            taken |= set(plan_dynamic(cid, ["a", "b", "c"], list(range(16)), view).take)
        assert taken == {15}, f"free partition 15 left untaken by all three plans (takes: {sorted(taken)})"
    finally:
        c.stop()
        c.close()

"""Listing a topic's owners, re-using what an earlier listing read (the rebalancer's path)."""

from __future__ import annotations

from kazoo.client import KazooClient

from jetkafka.coordination.ownership import PartitionOwnership
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
    assert PATHS.owner("t", 6) in reads  # our own node is always read again
    assert own_a.owners("t") == listed  # a full read agrees


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

"""ZooKeeper clients and group members for the coordination tests (group ``g``, topic ``t``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient

from jetkafka.config import ZooKeeperConfig
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._session import build_client, start_client

PATHS = GroupPaths("g")


@contextmanager
def two_clients(zk_connect: str, session_timeout_s: float = 10) -> Iterator[tuple[KazooClient, KazooClient]]:
    """Two started clients, each with a session of its own, as two instances would have."""
    config = ZooKeeperConfig(connect=zk_connect, session_timeout_s=session_timeout_s)
    a, b = build_client(config), build_client(config)
    start_client(a, config)
    start_client(b, config)
    try:
        yield a, b
    finally:
        for c in (a, b):
            c.stop()
            c.close()


def member(client: KazooClient, cid: str) -> tuple[PartitionOwnership, OffsetStore]:
    """Consumer ``cid`` of group ``g`` on ``client``, ready for topic ``t``."""
    ownership = PartitionOwnership(client, PATHS, cid)
    ownership.prepare("t")
    return ownership, OffsetStore(client, PATHS)

"""Fixtures the tests of jetkafka.ops share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:
    """A ZooKeeper client of the test cluster, to look at (or prepare) the nodes directly."""
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()

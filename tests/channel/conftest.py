from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:
    """A plain client rooted where the channels under test keep their nodes."""
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()

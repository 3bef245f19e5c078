from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from tests.support.coordination import two_clients


@pytest.fixture
def clients(zk_connect: str) -> Iterator[tuple[KazooClient, KazooClient]]:
    with two_clients(zk_connect) as pair:
        yield pair

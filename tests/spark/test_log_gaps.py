"""A partition whose committed offset has no record: a transaction's commit marker.

Transactional producers leave a control record after each transaction; consumers never see it,
so a micro-batch ending at a transaction's last record commits the marker's offset. The next
owner of the partition (a restart, a rebalance) reads from there and gets the record after the
marker first: the Spark processor re-reads once to be sure the log holds nothing in between,
then starts its chain at the committed offset. Real ZooKeeper, broker and Spark.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient

from examples.pipeline.events import EVENT_SCHEMA, encode, generate_events
from jetkafka.channel import InboundChannel
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.spark import SparkMicroBatchProcessor
from tests.spark.helpers import id_writer, read_ids
from tests.support.channels import channel_config, wait_until


def transaction(kafka_config: dict[str, Any], topic: str, events: list[dict[str, Any]]) -> None:
    """``events`` to partition 0 in one committed transaction (its marker takes the next offset)."""
    producer = Producer({**kafka_config, "transactional.id": f"{topic}-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for e in events:
        producer.produce(topic, value=encode(e), key=e["user"].encode(), partition=0)
    producer.commit_transaction(30)


def run_until_committed(
    spark: Any, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic: str, path: str, offset: int
) -> None:
    processor = SparkMicroBatchProcessor(
        id_writer(path), value_format="json", schema=EVENT_SCHEMA, max_events=1000, max_interval_ms=300, spark=spark
    )
    channel = InboundChannel.from_dict(channel_config(zk_connect, kafka_config, [topic]), processor=processor)
    with channel:
        wait_until(
            lambda: OffsetStore(zk, GroupPaths("g")).read_all(topic).get(0) == offset, 60, f"offset {offset} committed"
        )


def test_a_new_owner_starts_at_a_committed_transaction_marker(
    spark: Any, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = topic_factory(partitions=1)
    path = str(tmp_path / "out")
    first, second = generate_events(30, seed=1), generate_events(30, seed=2)
    for e in second:
        e["id"] = f"second-{e['id']}"
    transaction(kafka_config, topic, first)  # offsets 0..29, marker at 30
    run_until_committed(spark, zk, zk_connect, kafka_config, topic, path, 30)

    transaction(kafka_config, topic, second)  # offsets 31..60, marker at 61
    caplog.set_level(logging.INFO, logger="jetkafka.spark")
    # A new hold at offset 30, where no record is: before, every first batch (at 31) was sent
    # back to re-read from 30, and the partition never moved again.
    run_until_committed(spark, zk, zk_connect, kafka_config, topic, path, 61)

    ids = sorted(ident for ident, _batch in read_ids(path))
    assert ids == sorted(e["id"] for e in first + second), "every event once"
    rereads = [r for r in caplog.records if "re-reading from the committed offset" in r.getMessage()]
    gaps = [r.getMessage() for r in caplog.records if "no records at offsets" in r.getMessage()]
    assert len(rereads) == 1, [r.getMessage() for r in rereads]
    expected = (
        f"{topic}[0]: no records at offsets 30..30 (transaction markers or compaction); the micro-batch chain "
        "starts at the committed offset 30, its first event at 31"
    )
    assert gaps == [expected]

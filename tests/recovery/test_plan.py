"""The take-over decision, the node's JSON, and which processor recovery batches go to (no servers)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource
from jetkafka.config import parse_config
from jetkafka.errors import ConfigError, JetkafkaError
from jetkafka.recovery import RecoveryRecord, choose_processor, plan_gap
from jetkafka.recovery._service import RecoveryContext
from tests.config import minimal


def test_small_backlog_starts_at_the_committed_offset() -> None:
    assert plan_gap(committed=500, low=0, high=1500, max_lag=1000, max_records=None).start == 500
    assert plan_gap(committed=500, low=0, high=1500, max_lag=1000, max_records=None).gap is None
    assert plan_gap(committed=900, low=0, high=100, max_lag=10, max_records=None).start == 900  # past the end


def test_large_backlog_jumps_and_records_the_gap_half_open() -> None:
    plan = plan_gap(committed=0, low=0, high=50_000, max_lag=1000, max_records=None)
    assert plan.start == 49_000  # live reads the last max_lag records
    assert plan.gap == (0, 49_000)  # 0 is recovered, 49 000 is not (live reads it)
    assert (plan.lost, plan.capped) == (0, 0)
    # One past the limit already counts.
    assert plan_gap(committed=0, low=0, high=1001, max_lag=1000, max_records=None).gap == (0, 1)


def test_max_records_keeps_the_newest_part() -> None:
    plan = plan_gap(committed=0, low=0, high=50_000, max_lag=1000, max_records=10_000)
    assert plan.gap == (39_000, 49_000)
    assert plan.capped == 39_000


def test_offsets_below_the_low_watermark_are_lost() -> None:
    plan = plan_gap(committed=100, low=400, high=5000, max_lag=1000, max_records=None)
    assert (plan.start, plan.gap, plan.lost) == (4000, (400, 4000), 300)
    # Fewer than max_lag records left: live starts at the oldest one, nothing to recover.
    plan = plan_gap(committed=100, low=4500, high=5000, max_lag=1000, max_records=None)
    assert (plan.start, plan.gap, plan.lost) == (4500, None, 4400)


def test_record_json_round_trip_and_refusals() -> None:
    record = RecoveryRecord(((0, 10), (20, 30)), lost=3, capped=4, recovered=5, by="me", at=12.5)
    assert RecoveryRecord.decode(record.encode()) == record
    assert record.remaining == 20
    assert RecoveryRecord.decode(b'{"ranges": [[1, 2]]}') == RecoveryRecord(((1, 2),))
    refusals = [
        (b"nope", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"ranges": [[2, 1]]}', r"range \[2, 1\) is empty or negative"),
        (b'{"ranges": [], "lost": -1}', "lost must be a whole number >= 0, got -1"),
        (b'{"lost": "3"}', "lost must be a whole number >= 0, got '3'"),
    ]
    for bad, message in refusals:
        with pytest.raises(ValueError, match=message):
            RecoveryRecord.decode(bad)


class Plain(BatchEventProcessor):
    def __init__(self, tag: str = "") -> None:
        self.tag = tag

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        return BatchResponse.advance()


def fake_channel(live: BatchEventProcessor, **sections: Any) -> Any:
    data = {**minimal(), **sections}
    return SimpleNamespace(config=parse_config(data, "t.yaml", env={}), processor=live, pythonpath=())


def test_processor_choice() -> None:
    here = f"{__name__}:Plain"
    on = {"max_partition_lag": 10}
    # 1. recovery.processor: its own instance, with its own options.
    channel = fake_channel(Plain("live"), recovery={**on, "processor": {"class": here, "options": {"tag": "r"}}})
    chosen = choose_processor(channel, channel.processor, None)
    assert isinstance(chosen, Plain) and chosen.tag == "r"
    # 2. an object given for recovery.
    given = Plain("given")
    live = Plain("live")
    assert choose_processor(fake_channel(live, recovery=on), live, given) is given
    # 3. the channel's processor was built from processor.class: a second instance of it.
    live = Plain("x")
    channel = fake_channel(live, recovery=on, processor={"class": here, "options": {"tag": "x"}})
    chosen = choose_processor(channel, channel.processor, None)
    assert isinstance(chosen, Plain) and chosen is not live and chosen.tag == "x"
    # 4. an object given to the channel, nothing else: shared.
    other = Plain("obj")
    assert choose_processor(fake_channel(other, recovery=on), other, None) is other

    class Different(Plain):
        pass

    # processor.class names another class than the object the channel was given: shared too.
    shared = Different()
    assert choose_processor(fake_channel(shared, recovery=on, processor={"class": here}), shared, None) is shared


def test_spark_micro_batches_are_refused_as_recovery_processor() -> None:
    from jetkafka.spark._microbatch import SparkMicroBatchProcessor

    spark = SparkMicroBatchProcessor.__new__(SparkMicroBatchProcessor)  # never started
    with pytest.raises(ConfigError) as caught:
        choose_processor(fake_channel(spark, recovery={"max_partition_lag": 10}), spark, None)
    assert caught.value.key_path == "recovery.processor"
    assert "commits the live offsets" in caught.value.problem
    # With a per-batch processor for recovery, the Spark channel may recover.
    here = f"{__name__}:Plain"
    channel = fake_channel(spark, recovery={"max_partition_lag": 10, "processor": {"class": here}})
    assert isinstance(choose_processor(channel, channel.processor, None), Plain)


def test_a_separate_recovery_processor_cannot_commit_live_offsets() -> None:
    sent: list[Any] = []
    channel = SimpleNamespace(lease=lambda topic, partition: object(), commit_many=lambda *args: sent.append(args))
    context = RecoveryContext(channel, None, None)  # type: ignore[arg-type]
    with pytest.raises(JetkafkaError, match="cannot commit live offsets"):
        context.commit({("orders", 0): 10})
    # Every argument ChannelContext.commit takes is accepted, and refused the same way: a
    # processor written for the live path gets this error, not a TypeError.
    for expected in ({("orders", 0): 5}, {("orders", 0): None}):
        with pytest.raises(JetkafkaError, match="cannot commit live offsets"):
            context.commit({("orders", 0): 10}, None, None, expected)
        with pytest.raises(JetkafkaError, match="cannot commit live offsets"):
            context.commit({("orders", 0): 10}, extra=None, holds={}, expected=expected)
    assert sent == []  # nothing reached the channel

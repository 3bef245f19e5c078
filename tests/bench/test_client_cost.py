"""The client-cost part's source of messages and its pinning of threads to one CPU."""

from __future__ import annotations

import os
import threading

import pytest
from confluent_kafka import TopicPartition

from jetkafka.bench._client_cost import BuiltMessages, one_cpu


def _drain(source: BuiltMessages, calls: int) -> list[list[tuple[int, int]]]:
    return [[(m.partition(), m.offset()) for m in source.consume(3, timeout=0)] for _ in range(calls)]


def test_each_call_is_one_partitions_next_run_partitions_in_turn() -> None:
    source = BuiltMessages("t", per_partition=5, value=b"v" * 200)
    source.incremental_assign([TopicPartition("t", 0, 0), TopicPartition("t", 1, 2)])
    calls = _drain(source, 5)
    assert calls == [
        [(0, 0), (0, 1), (0, 2)],
        [(1, 2), (1, 3), (1, 4)],
        [(0, 3), (0, 4)],
        [],
        [],
    ]
    m = BuiltMessages("t", 1, b"v" * 200)
    m.incremental_assign([TopicPartition("t", 0, 0)])
    (msg,) = m.consume(10, timeout=0)
    assert msg.topic() == "t" and msg.value() == b"v" * 200 and msg.error() is None and len(msg) == 200


def test_paused_and_unassigned_partitions_are_held_back() -> None:
    source = BuiltMessages("t", per_partition=4, value=b"v")
    source.incremental_assign([TopicPartition("t", 0, 0), TopicPartition("t", 1, 0)])
    source.pause([TopicPartition("t", 0)])
    assert _drain(source, 3) == [[(1, 0), (1, 1), (1, 2)], [(1, 3)], []]
    source.resume([TopicPartition("t", 0)])
    source.incremental_unassign([TopicPartition("t", 1)])
    assert _drain(source, 3) == [[(0, 0), (0, 1), (0, 2)], [(0, 3)], []]


def test_other_calls_go_to_the_real_consumer() -> None:
    class Real:
        def list_topics(self, timeout: float) -> str:
            return f"metadata in {timeout}"

    assert BuiltMessages("t", 1, b"", Real()).list_topics(timeout=2) == "metadata in 2"  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        BuiltMessages("t", 1, b"").list_topics  # noqa: B018


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin"
)
def test_one_cpu_pins_every_thread_and_gives_them_back() -> None:
    before = os.sched_getaffinity(0)
    stop = threading.Event()
    older = threading.Thread(target=stop.wait)
    older.start()
    seen: dict[str, set[int]] = {}
    try:
        with one_cpu() as cpu:
            assert cpu == max(before)
            seen["older"] = os.sched_getaffinity(older.native_id)  # type: ignore[arg-type]
            newer = threading.Thread(target=lambda: seen.setdefault("newer", os.sched_getaffinity(0)))
            newer.start()
            newer.join()
        assert seen == {"older": {cpu}, "newer": {cpu}}
        assert os.sched_getaffinity(0) == before
        assert os.sched_getaffinity(older.native_id) == before  # type: ignore[arg-type]
    finally:
        stop.set()
        older.join()


def test_the_built_log_reports_its_end_as_a_fetched_partitions_high_watermark() -> None:
    # What librdkafka caches from its fetch responses; the channel reads it to tell a drained log.
    assert BuiltMessages("t", 7, b"v").get_watermark_offsets(TopicPartition("t", 3), cached=True) == (0, 7)

"""Lag in seconds of partitions seen from the group: the record at the committed offset (no servers)."""

from __future__ import annotations

from typing import Any

import pytest

from jetkafka.ops._committed_lag import CommittedRecordLag
from jetkafka.ops._lag_time import LagClock

NOW = 1_700_000_000.0


def part(partition: int, committed: int | None, high: int, lag_seconds: float | None = None) -> dict[str, Any]:
    return {
        "topic": "t", "partition": partition, "committed": committed, "low": 0, "high": high,
        "lag": None if committed is None else high - committed, "lag_seconds": lag_seconds,
    }  # fmt: skip


class Records:
    """Timestamps by (partition, offset); counts the reads."""

    def __init__(self, stamps: dict[tuple[int, int], int | None]) -> None:
        self.stamps = stamps
        self.reads: list[tuple[int, int]] = []

    def __call__(self, topic: str, partition: int, offset: int, timeout: float) -> int | None:
        self.reads.append((partition, offset))
        if (partition, offset) not in self.stamps:
            raise LookupError(f"no record at offset {offset} within {timeout:g} s")
        return self.stamps[(partition, offset)]


def test_the_age_of_the_record_at_the_committed_offset_and_zero_when_caught_up() -> None:
    parts = [part(0, 5, 9), part(1, 7, 7), part(2, 8, 7)]
    records = Records({(0, 5): int((NOW - 720) * 1000)})
    why = CommittedRecordLag().fill(parts, records, checked_at=NOW - 1, now=NOW)
    assert [p["lag_seconds"] for p in parts] == [pytest.approx(720), 0.0, 0.0]
    assert records.reads == [(0, 5)]  # caught up: nothing read
    assert why == {}


def test_the_same_rule_as_the_gauge() -> None:
    # A held partition whose buffer head is the record at the committed offset reads the same.
    ms = int((NOW - 42.5) * 1000)
    parts = [part(0, 5, 9)]
    CommittedRecordLag().fill(parts, Records({(0, 5): ms}), checked_at=NOW - 1, now=NOW)
    gauge = LagClock().lag_seconds(
        ("t", 0), position=5, buffered=4, next_timestamp_ms=ms, high_watermark=9, checked_at=NOW - 1, now=NOW
    )
    assert parts[0]["lag_seconds"] == gauge == pytest.approx(42.5)


def test_a_record_is_read_once_per_committed_offset() -> None:
    lag = CommittedRecordLag()
    records = Records({(0, 5): int((NOW - 60) * 1000), (0, 6): int((NOW - 30) * 1000)})
    first = [part(0, 5, 9)]
    lag.fill(first, records, checked_at=NOW, now=NOW)
    again = [part(0, 5, 10)]
    lag.fill(again, records, checked_at=NOW + 3, now=NOW + 3)
    assert records.reads == [(0, 5)]
    assert again[0]["lag_seconds"] == pytest.approx(63)  # the same record, 3 s older
    moved = [part(0, 6, 10)]
    lag.fill(moved, records, checked_at=NOW + 6, now=NOW + 6)
    assert records.reads == [(0, 5), (0, 6)]
    assert moved[0]["lag_seconds"] == pytest.approx(36)


def test_reads_per_refresh_are_bounded_and_those_left_out_go_first_next_time() -> None:
    lag = CommittedRecordLag(max_reads=2)
    records = Records({(p, 0): int((NOW - 10) * 1000) for p in range(3)})
    parts = [part(p, 0, 5) for p in range(3)]
    why = lag.fill(parts, records, checked_at=NOW, now=NOW)
    assert records.reads == [(0, 0), (1, 0)]
    assert parts[2]["lag_seconds"] is None
    assert why == {"t[2]": "not read yet (at most 2 records are read per refresh)"}
    parts = [part(p, 0, 5) for p in range(3)]
    assert lag.fill(parts, records, checked_at=NOW + 3, now=NOW + 3) == {}
    assert records.reads == [(0, 0), (1, 0), (2, 0)]
    assert [p["lag_seconds"] for p in parts] == [pytest.approx(13)] * 3


def test_unknown_values_say_why_and_values_already_known_are_kept() -> None:
    lag = CommittedRecordLag()
    records = Records({(2, 1): None})
    parts = [part(0, None, 5), part(1, 3, 5), part(2, 1, 5), part(3, 1, 5, lag_seconds=7.0)]
    why = lag.fill(parts, records, checked_at=NOW, now=NOW)
    assert [p["lag_seconds"] for p in parts] == [None, None, None, 7.0]
    assert why == {
        "t[0]": "nothing committed yet",
        "t[1]": "record at the committed offset unreadable: no record at offset 3 within 1 s",
        "t[2]": "the record at offset 1 has no timestamp",
    }
    assert (3, 1) not in records.reads  # the held partition's value came from its gauge
    # An unreadable record is tried again at the next refresh.
    lag.fill([part(1, 3, 5)], records, checked_at=NOW + 3, now=NOW + 3)
    assert records.reads.count((1, 3)) == 2

"""``jetkafka bench --only latency``: production to commit through the example Spark pipeline.

The watch is tested on its own (which records count, when they are stamped), then a tiny run
checks that every produced record was measured and the figures are well-formed; no figure is
compared with a threshold.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jetkafka.bench import _report as report
from jetkafka.bench._latency import CREATE_TIME, CommitWatch

REPO = Path(__file__).resolve().parents[2]


class _Message:
    def __init__(self, offset: int, created_ms: float, kind: int = CREATE_TIME) -> None:
        self._offset, self._stamp = offset, (kind, int(created_ms))

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return self._stamp


class _Context:
    """A channel context whose holds carry the committed offset the test sets."""

    def __init__(self) -> None:
        self.committed: dict[int, int | None] = {}

    def hold(self, topic: str, partition: int) -> Any:
        if partition not in self.committed:
            return None
        return SimpleNamespace(committed=self.committed[partition])


def test_a_record_is_stamped_once_its_partitions_commit_passes_it() -> None:
    watch = CommitWatch("t")
    context = _Context()
    watch.context = context
    now_ms = time.time() * 1000
    watch.since_ms = now_ms - 10_000
    watch.note(0, [_Message(0, now_ms - 20_000)])  # the warm-up: produced before the window
    watch.note(0, [_Message(o, now_ms - 3_000) for o in range(1, 4)])
    watch.note(0, [_Message(o, now_ms - 3_000) for o in range(2, 5)])  # re-delivered from offset 2
    watch.note(1, [_Message(0, now_ms - 1_000), _Message(1, now_ms, kind=0)])
    watch.poll()  # nothing held or committed yet
    assert watch.measured() == 0
    context.committed = {0: 3, 1: None}
    watch.poll()
    # Offsets 1 and 2 of partition 0 are below its committed offset; 3 and 4 are not yet.
    assert watch.measured() == 2
    assert all(2.9 < s < 4.0 for s in watch.latencies_s)
    context.committed = {0: 5, 1: 2}
    watch.poll()
    assert watch.measured() == 5  # offsets 3, 4 of partition 0 and offset 0 of partition 1
    assert watch.without_create_time == 1
    assert sorted(watch.latencies_s)[0] >= 0.99


def test_rows_say_when_the_producer_fell_behind() -> None:
    part = {
        "settings": {"target_s": 2.0, "rate_events_per_s": 10_000},
        "production": {"events_per_s": 6_000.0, "fell_behind": True, "max_behind_s": 1.5},
        "records": 1_000, "unmeasured": 3, "micro_batches": 4, "p50_s": 1.0, "p99_s": 3.0, "max_s": 4.0,
    }
    rows = report.table_rows({"latency": part})
    assert [r["figure"] for r in rows] == [f"production to commit, {q}" for q in ("p50", "p99", "max")]
    assert [r["ratio"] for r in rows] == [0.5, 1.5, 2.0]
    note = rows[0]["note"]
    assert "produced 6,000/s of 10,000/s: the producer fell behind (up to 1.50 s)" in note
    assert "3 records not committed in time" in note and "4 micro-batches" in note
    failed = report.table_rows({"latency": {"error": "no record measured"}})
    assert failed[0]["value"] is None and failed[0]["note"] == "failed: no record measured"


@pytest.fixture(scope="module")
def latency_run(spark_and_latency_run: dict[str, Any]) -> dict[str, Any]:
    """The shared bench run (tests/bench/conftest.py): its latency part, 500 events/s for 3 s."""
    return spark_and_latency_run


@pytest.mark.cluster
def test_every_produced_record_is_measured(latency_run: dict[str, Any]) -> None:
    lt = latency_run["results"]["latency"]
    assert "error" not in lt, lt
    settings, production = lt["settings"], lt["production"]
    assert settings["rate_events_per_s"] == 500 and settings["seconds"] == 3
    assert settings["max_events"] == 50_000 and settings["max_interval_ms"] == 1_000 and settings["target_s"] == 2.0
    assert production["produced"] >= 1 and production["events_per_s"] > 0
    assert production["fell_behind"] == (production["events_per_s"] < 0.97 * 500)
    assert lt["records"] == production["produced"] and lt["unmeasured"] == 0
    assert lt["without_create_time"] == 0
    assert lt["micro_batches"] >= 1 and lt["failures"] == 0
    assert 0 < lt["p50_s"] <= lt["p99_s"] <= lt["max_s"]
    assert 0 < lt["mean_s"] <= lt["max_s"]


@pytest.mark.cluster
def test_latency_table(latency_run: dict[str, Any]) -> None:
    rows = [r for r in latency_run["table"] if r["benchmark"] == "latency"]
    assert [r["figure"].rsplit(", ", 1)[1] for r in rows] == ["p50", "p99", "max"]
    assert all(r["baseline"] == "target max_interval_ms + 1 s" and r["baseline_value"] == 2.0 for r in rows)
    text = report.render_table(latency_run)
    assert "latency: the example's JSON events at 500/s for 3 s into 8 partitions" in text

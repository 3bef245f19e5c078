"""``jetkafka bench --only ordering`` with few records: the part runs end to end and checks itself.

No figure is compared with a threshold (speed is the benchmark's to print, not the tests' to
assert): the run must process every record once, keep each mode's order, and report it; and
the checks themselves must catch a run that lost, repeated or reordered records.
"""

from __future__ import annotations

from typing import Any

import pytest

from jetkafka.bench import _ordering as ordering
from jetkafka.bench import _ordering_scale as scale
from jetkafka.bench import _report as report
from jetkafka.bench._ordering_processors import OrderCheck
from tests.support.bench_runs import bench_json

EVENTS = 400
SCALE_EVENTS = 320  # 20 per partition


@pytest.fixture(scope="module")
def ordering_run() -> dict[str, Any]:
    return bench_json("--only", "ordering", "--ordering-events", str(EVENTS),
                      "--ordering-scale-events", str(SCALE_EVENTS), timeout=300)


def test_every_one_partition_row_processed_every_record_in_its_order(ordering_run: dict[str, Any]) -> None:
    part = ordering_run["results"]["ordering"]
    assert part["settings"]["events"] == EVENTS
    assert set(part["one_partition"]) == {"sync", "async"}
    for kind, result in part["one_partition"].items():
        rows = result["rows"]
        assert set(rows) == {"partition", "key-20", "key-1000", "none"}, kind
        for name, row in rows.items():
            assert "error" not in row, (kind, name, row)
            assert row["processed"] == EVENTS
            assert 0 < row["from_first_record_s"] < row["seconds"]
        assert rows["key-20"]["ordering"] == "key" and rows["key-1000"]["keys"] == 1000
        assert result["ratios"]["key-20/none"] == pytest.approx(rows["key-20"]["seconds"] / rows["none"]["seconds"])
        assert result["ratios"]["partition/key-1000"] == pytest.approx(
            rows["partition"]["seconds"] / rows["key-1000"]["seconds"])
    assert part["one_partition"]["sync"]["rows"]["none"]["settings"]["threads"] == ordering.SYNC_THREADS


def test_scale_rows_processed_every_record_once(ordering_run: dict[str, Any]) -> None:
    sc = ordering_run["results"]["ordering"]["scale"]
    assert sc["settings"]["events"] == SCALE_EVENTS and sc["settings"]["instances"] == 4
    assert [r["ordering"] for r in sc["rows"]] == list(scale.MODES)
    for row in sc["rows"]:
        assert "error" not in row, row
        assert row["processed"] == SCALE_EVENTS and row["events_per_s"] > 0
        assert row["ratio_to_partition"] == pytest.approx(row["events_per_s"] / sc["rows"][0]["events_per_s"])


def test_table_shows_each_row_and_its_check(ordering_run: dict[str, Any]) -> None:
    rows = [r for r in ordering_run["table"] if r["benchmark"] == "ordering"]
    assert len(rows) == 2 * 4 + 3
    assert all(r["value"] is not None and r["note"].startswith("checked:") for r in rows)
    # Parallel Consumer's figures are for 10,000 records: not set against a smaller run.
    assert all(r["baseline"] is None for r in rows[:8])
    text = report.render_table(ordering_run)
    assert "key, 20 keys; time.sleep processor, 64 threads" in text and "PARALLEL CONSUMER" in text


def _check(order: list[tuple[int, Any]], overlaps: int = 0) -> OrderCheck:
    check = OrderCheck(len(order))
    for offset, key in order:
        check.finished(0, offset, key)
    check.overlaps = overlaps
    return check


def test_the_check_catches_lost_repeated_and_reordered_records() -> None:
    good = [(0, b"a"), (1, b"b"), (3, b"b"), (2, b"a")]
    assert ordering.verify(_check(good), 4, "key") == []
    assert ordering.verify(_check(good), 4, "none") == []
    assert ordering.verify(_check(good), 4, "partition") == ["records finished out of offset order"]
    assert ordering.verify(_check(good[:3]), 4, "none") == ["3 of 4 records processed"]
    assert ordering.verify(_check([*good, (1, b"b")]), 4, "none") == ["1 records processed more than once"]
    assert ordering.verify(_check([(2, b"a"), (0, b"a"), (1, b"b"), (3, b"b")]), 4, "key") == [
        "1 keys' records finished out of offset order"]
    assert ordering.verify(_check(good, overlaps=2), 4, "key") == [
        "2 batches began while another batch held one of their keys"]


def test_the_scale_check_reads_the_instances_lines() -> None:
    lines = ["7 0 0 k0", "7 0 1 k16", "8 1 0 k1", "8 0 2 k0"]
    assert scale.verify(lines, 4, "key") == (4, [])
    assert scale.verify(lines, 4, "partition") == (4, [])
    swapped = ["7 0 2 k0", "7 0 1 k16", "8 1 0 k1", "8 0 0 k0"]
    assert scale.verify(swapped, 4, "key") == (4, ["1 keys' records finished out of offset order"])
    assert scale.verify(swapped, 4, "partition")[1] == ["1 partitions' records finished out of offset order"]
    assert scale.verify([*lines, "9 1 0 k1"], 4, "none")[1] == ["1 records processed more than once"]


def test_a_row_that_failed_its_check_shows_no_figure() -> None:
    part = {
        "settings": {"events": 10_000, "published": ordering.PUBLISHED, "sync_threads": 64, "max_delay_s": 0.005,
                     "seed": 1, "published_source": "x", "goals": {}},
        "one_partition": {"sync": {"rows": {
            "key-20": {"error": "check failed: 3 keys' records finished out of offset order", "ordering": "key"},
            "none": {"seconds": 1.0, "processed": 10_000, "ordering": "none"},
        }, "ratios": {"key-20/none": None}}},
        "scale": {"error": "RuntimeError: not balanced"},
    }
    rows = report.table_rows({"ordering": part})
    failed = next(r for r in rows if "key, 20 keys" in r["figure"])
    assert failed["value"] is None and failed["note"].startswith("FAILED: check failed")
    fine = next(r for r in rows if "none" in r["figure"])
    assert fine["baseline_value"] == 2.8 and fine["ratio"] == pytest.approx(1.0 / 2.8)
    assert rows[-1]["note"] == "failed: RuntimeError: not balanced"

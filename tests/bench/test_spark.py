"""``jetkafka bench --only spark``: the Arrow and row paths, the end-to-end run, the hand-written
loop and the peak held, on a tiny topic. No figure is compared with a threshold: the tests check
that each was measured, that the ratios are the figures' ratios, and that the counts add up.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from jetkafka.bench import _report as report
from jetkafka.bench._spark_workload import Workload, example_settings, processor_default
from tests.bench.conftest import SPARK_EVENTS

EXAMPLE_MAX_EVENTS = example_settings()[1]

REPO = Path(__file__).resolve().parents[2]
EVENTS = SPARK_EVENTS


@pytest.fixture(scope="module")
def aggregate_run(spark_and_latency_run: dict[str, Any]) -> dict[str, Any]:
    """The shared bench run (tests/bench/conftest.py): its Spark part, aggregate workload."""
    return spark_and_latency_run


@pytest.mark.cluster
def test_every_path_is_measured_on_the_example_workload(aggregate_run: dict[str, Any]) -> None:
    sp = aggregate_run["results"]["spark"]
    assert "error" not in json.dumps(sp), sp
    settings = sp["settings"]
    assert settings["workload"] == "aggregate"
    assert settings["max_events"] == EXAMPLE_MAX_EVENTS and settings["max_interval_ms"] == 1_000
    for path in ("arrow", "rows", "end_to_end", "loop"):
        assert sp[path]["events"] == EVENTS
        assert sp[path]["events_per_s"] == pytest.approx(EVENTS / sp[path]["seconds"])
    # The loop reads micro-batches of max_events and commits after each.
    assert sp["loop"]["micro_batches"] == math.ceil(EVENTS / EXAMPLE_MAX_EVENTS)
    assert 0 < sp["loop"]["commit_seconds"] < sp["loop"]["seconds"]
    e2e = sp["end_to_end"]
    assert e2e["micro_batches"] >= 1 and e2e["failures"] == 0
    assert e2e["mean_micro_batch_events"] == pytest.approx(EVENTS / e2e["micro_batches"])


@pytest.mark.cluster
def test_ratios_and_peak_held(aggregate_run: dict[str, Any]) -> None:
    sp = aggregate_run["results"]["spark"]
    e2e = sp["end_to_end"]
    ratios = sp["end_to_end_ratios"]
    for path in ("arrow", "rows", "loop"):
        assert ratios[path] == pytest.approx(e2e["events_per_s"] / sp[path]["events_per_s"])
    # Every event passes through the processor's memory; no more than the topic holds.
    assert 0 < e2e["peak_held_events"] <= EVENTS
    assert e2e["max_events"] == EXAMPLE_MAX_EVENTS
    assert e2e["micro_batches_in_memory_at_peak"] == pytest.approx(e2e["peak_held_events"] / EXAMPLE_MAX_EVENTS)


@pytest.mark.cluster
def test_table_shows_the_three_ratios_with_their_targets(aggregate_run: dict[str, Any]) -> None:
    rows = {r["figure"]: r for r in aggregate_run["table"]}
    sp = aggregate_run["results"]["spark"]
    for figure, path, target in (
        ("end to end / row by row", "rows", "2"),
        ("end to end / Arrow path", "arrow", "0.5"),
        ("end to end / hand-written loop", "loop", "1"),
    ):
        row = rows[figure]
        assert row["baseline_value"] == sp[path]["events_per_s"]
        assert row["ratio"] == pytest.approx(sp["end_to_end_ratios"][path])
        assert f"target ratio >= {target};" in row["note"]
    peak = rows["end to end: micro-batches in memory at peak"]
    assert peak["value"] == sp["end_to_end"]["micro_batches_in_memory_at_peak"]
    text = report.render_table(aggregate_run)
    assert "hand-written loop: consumer -> Arrow -> DataFrame -> commit" in text
    assert "workload aggregate" in text and "max_events 50,000" in text


def test_noop_workload_takes_the_processors_defaults(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    done: list[Any] = []
    work = Workload.named("noop", tmp_path, done.append)
    assert (work.max_events, work.max_interval_ms) == (processor_default("max_events"), processor_default("max_interval_ms"))
    assert work.processor_options() == {"max_events": work.max_events, "max_interval_ms": work.max_interval_ms,
                                        "value_format": "binary"}
    work.batch_function()("df", 3)
    assert done == ["df"]
    assert work.parse("df") == "df"  # binary values stay as they are


def test_aggregate_workload_is_the_example_pipeline(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    work = Workload.named("aggregate", tmp_path, lambda df: None)
    options = work.processor_options()
    assert options["value_format"] == "json" and options["max_events"] == EXAMPLE_MAX_EVENTS
    assert options["schema"] == "id STRING, user STRING, cents BIGINT, ts BIGINT"
    # Each call gets a sink of its own: a sink that saw a batch id would not publish it again.
    assert work.batch_function() is not work.batch_function()
    with pytest.raises(ValueError, match="unknown Spark workload"):
        Workload.named("sum", tmp_path, lambda df: None)


def test_a_failed_loop_still_reports_the_other_paths() -> None:
    results = {"spark": {
        "settings": {},
        "rows": {"events_per_s": 100.0},
        "arrow": {"events_per_s": 300.0},
        "loop": {"error": "consumer closed"},
        "end_to_end": {"events_per_s": 250.0, "micro_batches": 1, "peak_held_events": 50,
                       "max_events": 100, "micro_batches_in_memory_at_peak": 0.5},
    }}
    rows = {r["figure"]: r for r in report.table_rows(results)}
    assert rows["hand-written loop"]["note"] == "failed: consumer closed"
    assert rows["end to end / Arrow path"]["ratio"] == pytest.approx(250 / 300)
    assert "end to end / hand-written loop" not in rows
    assert rows["end to end: micro-batches in memory at peak"]["value"] == 0.5

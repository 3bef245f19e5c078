"""``jetkafka bench --quick``: the benchmark machinery runs end to end and reports well-formed figures.

No figure is compared with a threshold: these tests only check that every part measured
something and that the JSON document, the table and the chart are built from it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jetkafka.bench import _report as report
from jetkafka.bench._handoff import INSTANCES, percentile, run_trials
from jetkafka.bench._progress import Progress
from tests.support.bench_runs import bench_json


@pytest.fixture(scope="module")
def quick_run() -> dict[str, Any]:
    """One ``jetkafka bench --quick`` of throughput, client cost and hand-off (2 trials), on its own dev stack."""
    return bench_json("--quick", "--only", "throughput,client,handoff", "--trials", "2", timeout=300)


def test_document_describes_the_run(quick_run: dict[str, Any]) -> None:
    assert quick_run["quick"] is True
    assert quick_run["parts"] == ["throughput", "client", "handoff"]
    machine = quick_run["machine"]
    assert machine["cpus"] >= 1 and machine["python"] and machine["librdkafka"]
    assert quick_run["broker"].startswith("noida-db")
    assert quick_run["zookeeper"][0].isdigit()
    assert len(quick_run["load_average"]["start"]) == 3
    assert set(quick_run["results"]) == {"throughput", "client", "handoff"}


def test_throughput_figures(quick_run: dict[str, Any]) -> None:
    tp = quick_run["results"]["throughput"]
    assert "error" not in tp, tp
    assert tp["settings"]["events"] == 50_000 and tp["settings"]["partitions"] == 8
    assert tp["settings"]["channel_defaults"]["batch_max_events"] == 500
    variants = {r["variant"]: r for r in tp["rows"]}
    assert {"plain", "jetkafka-1t", "jetkafka-2t", "jetkafka-4t"} <= set(variants)
    for row in tp["rows"]:
        assert row["events_per_s"] > 0 and row["samples_events_per_s"]
        # The clock from the assignment includes the wait for the first event: never faster.
        assert row["from_first_event_events_per_s"] >= row["events_per_s"]
        assert row["cpu_seconds_per_million"] > 0
        if row["variant"] != "plain":
            assert row["from_first_event_ratio"] == pytest.approx(
                row["from_first_event_events_per_s"] / variants["plain"]["from_first_event_events_per_s"]
            )
            assert row["baseline_events_per_s"] == variants["plain"]["events_per_s"]
            assert row["ratio"] == pytest.approx(row["events_per_s"] / row["baseline_events_per_s"])
            assert row["batches"] > 0
            # The last batch ends before its commit lands.
            assert row["to_last_batch_events_per_s"] >= row["events_per_s"]
            assert row["to_last_batch_ratio"] > 0


def test_client_cost_figures(quick_run: dict[str, Any]) -> None:
    cc = quick_run["results"]["client"]
    assert "error" not in cc, cc
    assert cc["settings"]["events"] == 50_000 and cc["settings"]["partitions"] == 8
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    assert cc["settings"]["cpu"] == (max(cpus) if len(cpus) > 1 else None)
    rows = {r["variant"]: r for r in cc["rows"]}
    assert set(rows) == {r["variant"] for r in quick_run["results"]["throughput"]["rows"]}
    for row in cc["rows"]:
        assert row["events_per_s"] > 0 and row["cpu_seconds_per_million"] > 0
        if row["variant"] != "plain":
            # 50,000 events in batches of at most batch_max_events, every one committed.
            assert row["batches"] >= 50_000 / row["settings"].get("batch_max_events", 500)
            assert row["ratio"] == pytest.approx(row["events_per_s"] / rows["plain"]["events_per_s"])


def test_handoff_figures(quick_run: dict[str, Any]) -> None:
    ho = quick_run["results"]["handoff"]
    assert ho["settings"]["trials"] == 2 and ho["settings"]["zookeeper_session_timeout_s"] == 3.0
    for kind in ("graceful", "kill"):
        fig = ho["jetkafka"][kind]
        assert fig["trials"] == 2
        # Each trial stops an instance that holds half of the 8 partitions.
        assert fig["samples"] == 8 and len(fig["latencies_s"]) == 8
        assert 0 < fig["p50_s"] <= fig["p99_s"] <= fig["max_s"]
    group = ho["consumer_group"]
    assert group["settings"]["session.timeout.ms"] == 3000
    # Without a broker that has consumer groups the part says why; with one it has figures
    # (or, for a series that failed on that broker, the error).
    if "unavailable" in group:
        assert group["unavailable"].strip()
        return
    for kind in ("graceful", "kill"):
        fig = group[kind]
        if "error" in fig:
            assert fig["error"].strip()
        else:
            assert fig["trials"] == 2 and 0 < fig["p50_s"] <= fig["p99_s"]


def test_table_rows_pair_figures_with_baselines(quick_run: dict[str, Any]) -> None:
    rows = quick_run["table"]
    assert {r["benchmark"] for r in rows} == {"throughput", "client cost", "hand-off"}
    for row in rows:
        assert set(row) == {"benchmark", "figure", "value", "unit", "baseline", "baseline_value", "ratio", "note"}
        if row["benchmark"] == "throughput" and row["baseline"]:
            assert row["ratio"] > 0
    text = report.render_table(quick_run)
    assert "jetkafka, 4 threads" in text and "hand-off after SIGKILL, p99" in text
    assert "client cost: 50,000 events of 200 B built in the process" in text


def test_chart(quick_run: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    assert report.write_png(quick_run, str(path)) is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parts_that_could_not_run_say_why() -> None:
    results = {
        "spark": {"unavailable": "pyspark missing", "settings": {}},
        "client": {"unavailable": "cannot build messages"},
        "handoff": {"jetkafka": {"error": "boom"}, "consumer_group": {"unavailable": "no groups"}},
        "memory": {"jetkafka": {"error": "exit 1"}, "plain": {}, "settings": {"events": 10}},
    }
    rows = report.table_rows(results)
    assert all(r["value"] is None for r in rows)
    notes = " ".join(r["note"] for r in rows)
    assert "not run: pyspark missing" in notes and "failed: boom" in notes and "failed: exit 1" in notes
    assert "not run: cannot build messages" in notes


def test_percentile_is_nearest_rank() -> None:
    values = [float(x) for x in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0], 50) == 1.0


class _ScriptedGroup:
    """A hand-off group whose third graceful trial fails, as when an instance dies at start."""

    def __init__(self) -> None:
        self.instances: list[int] = []
        self.spawned = 0
        self.trials: list[str] = []

    def spawn(self) -> None:
        self.spawned += 1
        self.instances.append(self.spawned)

    def stop_instances(self) -> None:
        self.instances.clear()

    def trial(self, sig: Any) -> list[float]:
        kind = "graceful" if sig.name == "SIGTERM" else "kill"
        self.trials.append(kind)
        if kind == "graceful" and self.trials.count("graceful") == 3:
            raise RuntimeError("instance 42 exited (status 1)")
        return [0.1] * 4


def test_a_failed_trial_ends_its_kind_and_the_next_kind_runs_on_a_fresh_pair() -> None:
    group = _ScriptedGroup()
    out = run_trials(group, 5, Progress(10, enabled=False), "jetkafka", ("graceful", "kill"))  # type: ignore[arg-type]
    assert out["graceful"]["trials"] == 2 and "instance 42 exited" in out["graceful"]["error"]
    assert out["kill"]["trials"] == 5 and "error" not in out["kill"]
    assert group.trials == ["graceful"] * 3 + ["kill"] * 5
    assert group.spawned == 2 * INSTANCES  # the pair of the failed kind was replaced

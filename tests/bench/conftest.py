"""One ``jetkafka bench`` run of the Spark and latency parts, shared by their tests.

The two parts in one process share one dev stack and one JVM start, which halves what their
tests cost the suite.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.bench_runs import bench_json

SPARK_EVENTS = 6_000  # the aggregate workload's records
LATENCY_RATE = 500  # events/s, for LATENCY_SECONDS
LATENCY_SECONDS = 3


@pytest.fixture(scope="session")
def spark_and_latency_run() -> dict[str, Any]:
    """``jetkafka bench --only spark,latency``: the aggregate workload of SPARK_EVENTS events, and
    latency at LATENCY_RATE events/s for LATENCY_SECONDS, on a dev stack of its own."""
    pytest.importorskip("pyspark")
    return bench_json(
        "--only", "spark,latency", "--spark-workload", "aggregate", "--spark-events", str(SPARK_EVENTS),
        "--repeat", "1", "--latency-rate", str(LATENCY_RATE), "--latency-seconds", str(LATENCY_SECONDS),
        timeout=900,
    )

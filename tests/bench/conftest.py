"""One ``jetkafka bench`` run of the Spark and latency parts, shared by their tests.

The two parts in one process share one dev stack and one JVM start, which halves what their
tests cost the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SPARK_EVENTS = 6_000  # the aggregate workload's records
LATENCY_RATE = 500  # events/s, for LATENCY_SECONDS
LATENCY_SECONDS = 3


@pytest.fixture(scope="session")
def spark_and_latency_run() -> dict[str, Any]:
    """``jetkafka bench --only spark,latency``: the aggregate workload of SPARK_EVENTS events, and
    latency at LATENCY_RATE events/s for LATENCY_SECONDS, on a dev stack of its own."""
    pytest.importorskip("pyspark")
    proc = subprocess.run(
        [
            sys.executable, "-m", "jetkafka", "bench", "--only", "spark,latency", "--spark-workload", "aggregate",
            "--spark-events", str(SPARK_EVENTS), "--repeat", "1", "--latency-rate", str(LATENCY_RATE),
            "--latency-seconds", str(LATENCY_SECONDS), "--json", "--no-progress",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result

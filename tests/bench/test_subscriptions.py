"""``jetkafka bench --only subscriptions``: N channel files in one process against N processes.

The run is tiny (3 subscriptions, 400 events) and no figure is compared with a threshold: the
tests check that both setups report every figure, with the counts the setups imply (one
ZooKeeper session against three), and that a process that cannot start ends the part with
its cause and leaves no process behind.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from jetkafka.bench import _report as report
from jetkafka.bench import _subscriptions as subscriptions
from jetkafka.bench._stack import BenchCluster
from jetkafka.bench._subscriptions_report import FIGURES as ROW_FIGURES
from tests.support.bench_runs import bench_json
from tests.support.cluster import Cluster

N = 3
EVENTS = 400


@pytest.fixture(scope="module")
def subscriptions_run() -> dict[str, Any]:
    """One quick run of the subscriptions part on a dev stack of its own."""
    return bench_json("--quick", "--only", "subscriptions", "--subscriptions", str(N),
                      "--subscription-events", str(EVENTS), timeout=180)


@pytest.mark.cluster
def test_both_setups_report_every_figure(subscriptions_run: dict[str, Any]) -> None:
    part = subscriptions_run["results"]["subscriptions"]
    settings = part["settings"]
    assert settings["subscriptions"] == N and settings["events"] == EVENTS and settings["rounds"] == 1
    one, many = part["one_process"], part["processes"]
    assert "error" not in one and "error" not in many, part
    assert (one["processes"], many["processes"]) == (1, N)
    for setup in (one, many):
        assert setup["subscriptions"] == N and setup["events"] == N * EVENTS
        missing = [k for k in subscriptions.FIGURES if setup.get(k) is None]
        assert not missing, missing
        assert setup["start_s"] > 0 and setup["backlog_s"] > 0
        assert setup["cpu_seconds_to_start"] > 0 and setup["cpu_seconds_backlog"] > 0
        assert setup["cpu_seconds_per_1000_events"] == pytest.approx(
            setup["cpu_seconds_backlog"] / (N * EVENTS) * 1000
        )
        assert setup["idle_cpu_percent"] >= 0
        assert 0 < setup["pss_bytes"] <= setup["rss_bytes"] <= setup["rss_peak_bytes"]
        assert setup["threads"] >= setup["processes"]
        assert setup["broker_tcp_connections"] >= N  # a consumer per channel at least
        assert setup["stop_s"] > 0
        assert "unclean_exits" not in setup, setup["unclean_exits"]
    # One ZooKeeper session (and connection) for the process, one per process otherwise.
    assert (one["zk_sessions"], many["zk_sessions"]) == (1, N)
    assert (one["zk_tcp_connections"], many["zk_tcp_connections"]) == (1, N)
    assert (one["zk_connections"], many["zk_connections"]) == (1, N)


@pytest.mark.cluster
def test_table_sets_the_processes_against_the_one_process(subscriptions_run: dict[str, Any]) -> None:
    rows = [r for r in subscriptions_run["table"] if r["benchmark"] == "subscriptions"]
    assert len(rows) == len(ROW_FIGURES)
    for row in rows:
        assert row["baseline"] == "one process" and row["value"] is not None and row["ratio"] > 0
    sessions = next(r for r in rows if r["figure"].startswith("ZooKeeper sessions"))
    assert (sessions["value"], sessions["baseline_value"], sessions["ratio"]) == (N, 1, N)
    text = report.render_table(subscriptions_run)
    assert f"time to start all, {N} processes" in text
    assert f"subscriptions: {N} channel files (distinct groups) on one topic of 8 partitions" in text
    assert f"{EVENTS:,} events of 200 B produced, read by every group" in text


def test_a_failed_setup_says_why() -> None:
    part = {"settings": {"subscriptions": 40}, "one_process": {"error": "jetkafka run DIR exited with status 2"}}
    rows = report.table_rows({"subscriptions": part})
    assert len(rows) == 1 and rows[0]["value"] is None
    assert rows[0]["note"] == "failed: jetkafka run DIR exited with status 2"
    assert "one process" in rows[0]["figure"]


def _jetkafka_runs() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "run" in child.cmdline() and "jetkafka" in child.cmdline():
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


@pytest.mark.parametrize("setup", [subscriptions.ONE, subscriptions.MANY])
def test_a_process_that_cannot_start_ends_the_part_with_its_cause(
    setup: str, cluster: Cluster, zk_connect: str, tmp_path: Path
) -> None:
    bench = BenchCluster({"connect": zk_connect}, cluster.client_config(), broker="test", local=True,
                         workdir=tmp_path / "bench")
    configs = []
    for i in range(N):
        config = bench.channel_config(f"g-{uuid.uuid4().hex[:8]}-{i}", "t", threads=2)
        config["processor"] = {"class": "jetkafka.bench._processors:NoSuchProcessor"}
        configs.append(config)
    with pytest.raises(RuntimeError) as failed:
        subscriptions.measure_setup(bench, setup, configs, tmp_path / setup, "t", 10, 1.0)
    message = str(failed.value)
    assert "exited with status 2" in message and "NoSuchProcessor" in message, message
    assert "before every group owned its partitions" in message
    assert not _jetkafka_runs()

"""SIGKILL between ``fn`` and the commit: the next owner replays the batch under the same id,
and the Parquet output holds every event exactly once.

The killed instance is a ``jetkafka run`` process. Its replacement is a second process whose
Spark driver starts while the first one runs (Spark takes a while to start on a small
machine) and whose channel starts only after the kill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from kazoo.client import KazooClient

from examples.pipeline.events import EVENT_SCHEMA, generate_events, records
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from tests.spark.helpers import read_ids, spark_section
from tests.support.channels import wait_until
from tests.support.processes import REPO, Member

pytestmark = pytest.mark.slow

EVENTS = 3_000


def member_config(
    zk_connect: str, kafka_config: dict[str, Any], topic: str, fn: str, fn_options: dict[str, Any]
) -> dict[str, Any]:
    return {
        "zookeeper": {"connect": zk_connect, "session_timeout_s": 4},
        "kafka": dict(kafka_config),
        "channel": {"group": "g", "topics": [topic], "threads": 2, "rebalance_delay_ms": 50, "batch_max_events": 500},
        "processor": {
            "class": "jetkafka.spark:SparkMicroBatchProcessor",
            "options": {
                "fn": fn,
                "fn_options": fn_options,
                "value_format": "json",
                "schema": EVENT_SCHEMA,
                "max_events": 1_000,
                "max_interval_ms": 500,
            },
        },
        "spark": spark_section(),
        "logging": {"level": "INFO"},
    }


class StandbyInstance:
    """``python -m tests.spark.helpers``: Spark starts now, the channel when ``go`` is touched."""

    def __init__(self, workdir: Path, name: str, config: dict[str, Any]) -> None:
        self.name = name
        self.go = workdir / f"{name}.go"
        self.log_path = workdir / f"{name}.log"
        config_path = workdir / f"{name}.yaml"
        config_path.write_text(yaml.safe_dump(config))
        self._log = open(self.log_path, "w")  # noqa: SIM115 - the child's log, closed by stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.helpers", str(config_path), "--go", str(self.go)],
            cwd=str(REPO),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def start_channel(self) -> None:
        self.go.touch()

    def terminate(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop_quietly(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


def wait_for_processes_to_end(pids: list[int]) -> None:
    """The Spark JVM of a killed instance exits when its Python parent's pipe closes."""
    procs = [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert not alive, f"left running: {alive}"


def test_sigkill_between_fn_and_commit_replays_exactly_once(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=4)
    events = generate_events(EVENTS, seed=3)
    produce(topic, records(events, 4))
    out = str(tmp_path / "events")
    signal_file = tmp_path / "written"
    config = member_config(
        zk_connect, kafka_config, topic, "tests.spark.helpers:stall_after_write",
        {"path": out, "signal_file": str(signal_file)},
    )
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    store = OffsetStore(zk, GroupPaths("g"))
    first = Member(tmp_path, "first", config)
    second = StandbyInstance(tmp_path, "second", config)
    try:
        wait_until(signal_file.exists, timeout=240, what="the first instance's fn to write its output")
        batch_id = int(signal_file.read_text().split()[0])
        pending_root = f"/consumers/g/microbatches/pending/{topic}"
        pending = {int(p): json.loads(zk.get(f"{pending_root}/{p}")[0]) for p in zk.get_children(pending_root)}
        assert pending and {doc["batch_id"] for doc in pending.values()} == {batch_id}
        committed = store.read_all(topic)
        assert all(committed.get(p, 0) == doc["from"] for p, doc in pending.items())
        children = [c.pid for c in psutil.Process(first.pid).children(recursive=True)]
        first.kill()
        wait_for_processes_to_end(children)

        killed_rows = sum(1 for _, b in read_ids(out) if b == batch_id)
        assert killed_rows == sum(doc["to"] - doc["from"] for doc in pending.values())

        second.start_channel()
        wait_until(
            lambda: sum(store.read_all(topic).values()) == EVENTS, timeout=240, what="all offsets committed"
        )
        assert second.terminate(60) == 0
        log = second.log()
        assert f"replaying micro-batch {batch_id}" in log
        assert not zk.get_children(pending_root)
    finally:
        first.stop_quietly()
        second.stop_quietly()
        zk.stop()
        zk.close()

    rows = read_ids(out)
    ids = [i for i, _ in rows]
    assert len(ids) == EVENTS, f"{len(ids) - len(set(ids))} duplicates, {EVENTS - len(set(ids))} missing"
    assert set(ids) == {e["id"] for e in events}
    # The replay overwrote the killed instance's output for that batch instead of adding to it.
    assert sum(1 for _, b in rows if b == batch_id) == killed_rows

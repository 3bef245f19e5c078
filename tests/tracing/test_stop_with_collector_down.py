"""A stop with the trace collector down: ``jetkafka run`` with tracing on, SIGTERM, and the whole
flush of the queued spans bounded as docs/operations.md says, whatever the collector does; the
partitions are released and committed first, and the spans that could not be sent are counted
in one log line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kazoo.client import KazooClient

from jetkafka.coordination._paths import GroupPaths
from tests.support.channels import channel_config, values, wait_until
from tests.support.group_watch import committed
from tests.support.processes import REPO
from tests.support.recording import read_deliveries
from tests.tracing.broken_collectors import broken_collector
from tests.tracing.conftest import SKIP_REASON

pytest.importorskip("opentelemetry.sdk", reason=SKIP_REASON)
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason=SKIP_REASON)

FLUSH_BOUND_S = 5.0  # docs/operations.md: "the queued spans are flushed (5 s at most)"
MARGIN_S = 3.0  # the rest of the stop and the interpreter's exit, on a loaded machine
RECORDS, PARTITIONS = 100, 2
LOST = re.compile(r"tracing: (\d+) spans? not exported")


@pytest.mark.parametrize("collector", ["refused", "silent", "slow"])
def test_sigterm_exits_within_the_flush_bound_whatever_the_collector_does(
    tmp_path: Path, collector: str, zk: KazooClient, zk_connect: str, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    produce(topic, values(RECORDS, PARTITIONS))
    out = tmp_path / "o"
    config = channel_config(zk_connect, kafka_config, [topic], batch_max_events=5)
    config["processor"] = {"class": "tests.support.recording:FileRecorder", "options": {"path": str(out)}}
    log = tmp_path / "stderr.txt"
    # Small export requests: the spans of the run's 20 batches and their commits make a backlog
    # of several requests, each of which the old flush gave a full export timeout.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] = "10"
    with broken_collector(collector) as receiver:
        config["tracing"] = {"enabled": True, "endpoint": receiver.endpoint}
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(config))
        with log.open("w") as stderr_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "jetkafka", "run", str(path), "--pythonpath", str(REPO), "--no-watch"],
                cwd=str(REPO), stderr=stderr_file, env=env, text=True,
            )
        try:
            wait_until(lambda: out.exists() and len(read_deliveries(str(out))) == RECORDS, what="every record")
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            try:
                status = proc.wait(FLUSH_BOUND_S + MARGIN_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"still stopping {FLUSH_BOUND_S + MARGIN_S:g} s after SIGTERM:\n{log.read_text()[-3000:]}")
            took = time.monotonic() - signalled
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    stderr = log.read_text()
    assert status == 0, stderr[-3000:]
    assert took < FLUSH_BOUND_S + MARGIN_S
    assert "Traceback" not in stderr
    # Released and committed before the flush: every record's offset is committed, no owner left.
    assert committed(zk, topic) == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
    assert zk.get_children(GroupPaths("g").owners(topic)) == []
    # What could not be sent is counted, once: with what the collector took, at least a span
    # for each batch.
    lost = [line for line in stderr.splitlines() if LOST.search(line)]
    assert len(lost) == 1, stderr[-3000:]
    assert f"{receiver.endpoint}/v1/traces" in lost[0]
    (batches,) = (int(m.group(1)) for m in re.finditer(r"stopped: \d+ events in (\d+) batches", stderr))
    assert batches >= RECORDS // 5
    assert int(LOST.search(lost[0]).group(1)) + receiver.spans_taken >= batches  # type: ignore[union-attr]

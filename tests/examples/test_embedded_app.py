"""examples/embedded_app.py run the way docs/embedding.md describes, on the test cluster.

The application runs as a child process with the addresses in the environment. It processes
every record of a fresh topic once, commits them all, and on SIGTERM exits 0 after writing its
report; when a batch in hand outlasts ``channel.shutdown_timeout_s``, it exits 1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from jetkafka.config import load_config
from tests.support.channels import committed_offsets, wait_until

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "embedded_app.yaml"
GROUP = "embedded-app"
PARTITIONS = 3


def test_defaults_point_at_a_local_stack_and_name_no_processor() -> None:
    config = load_config(CONFIG, env={})
    assert config.zookeeper.connect == "127.0.0.1:2181/jetkafka"
    assert config.kafka["bootstrap.servers"] == "127.0.0.1:9092"
    assert config.channel.topics == ("events",)
    assert config.channel.group == GROUP
    assert config.channel.shutdown_timeout_s == 15
    assert config.processor is None  # the application passes its own


def test_an_invalid_file_is_one_line_and_exit_status_2(tmp_path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.read_text().replace("threads: 2", "threads: two"))
    done = subprocess.run(
        [sys.executable, "examples/embedded_app.py", str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,  # the exit status is what is checked
    )
    assert done.returncode == 2, done.stderr
    assert "channel.threads" in done.stderr
    assert "Traceback" not in done.stderr


@contextmanager
def embedded_app(
    cluster: Any, zk_connect: str, topic: str, tmp_path: Path, *extra: str, shutdown_timeout_s: int = 15
) -> Iterator[tuple[subprocess.Popen[bytes], KazooClient, Path, Path]]:
    """The application running on ``topic`` with a copy of the example's file in ``tmp_path``
    (``config.yaml``, free to edit), and a ZooKeeper client in its chroot."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.read_text())
    report = tmp_path / "report.json"
    log_path = tmp_path / "embedded_app.log"
    env = {
        **os.environ,
        "JETKAFKA_ZOOKEEPER": zk_connect,  # host:port/chroot of this test; the file adds /jetkafka
        "JETKAFKA_BOOTSTRAP": cluster.bootstrap,
        "EVENTS_TOPIC": topic,
        "SHUTDOWN_TIMEOUT_S": str(shutdown_timeout_s),
        "PYTHONUNBUFFERED": "1",
    }
    root = KazooClient(hosts=zk_connect)
    root.start(timeout=15)
    root.ensure_path("/jetkafka")
    root.stop()
    root.close()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "examples/embedded_app.py", str(config), "--report", str(report), *extra],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    zk = KazooClient(hosts=f"{zk_connect}/jetkafka")
    try:
        zk.start(timeout=15)
        yield proc, zk, report, log_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        zk.stop()
        zk.close()


def running(proc: subprocess.Popen[bytes], log_path: Path, predicate: Callable[[], bool]) -> Callable[[], bool]:
    def check() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the application exited early ({proc.returncode}):\n{log_path.read_text()}")
        return predicate()

    return check


def test_processes_every_record_once_and_exits_0_on_sigterm(
    cluster, zk_connect, topic_factory, produce, tmp_path
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    records = [(i % PARTITIONS, str(i).encode(), f"event {i}".encode()) for i in range(1500)]
    offsets = produce(topic, records)
    ends = {p: 0 for p in range(PARTITIONS)}
    for (partition, *_), offset in zip(records, offsets, strict=True):
        ends[partition] = max(ends[partition], offset + 1)

    with embedded_app(cluster, zk_connect, topic, tmp_path, "--watch", "--progress-s", "1") as (
        proc,
        zk,
        report,
        log_path,
    ):
        wait_until(
            running(proc, log_path, lambda: committed_offsets(zk, GROUP, topic) == ends),
            timeout=90,
            what=f"offsets {ends} committed",
        )
        # A progress line, read from ChannelMetrics(channel).view(), counts them all.
        progress = f"{PARTITIONS} partitions held, {len(records)} events processed"
        wait_until(running(proc, log_path, lambda: progress in log_path.read_text()), timeout=30, what=progress)
        # A hot deploy of a setting applied in place, seen by the watcher.
        config = tmp_path / "config.yaml"
        config.write_text(config.read_text().replace("batch_max_events: 200", "batch_max_events: 50"))
        changed = "changed: in-place (channel.batch_max_events)"
        wait_until(running(proc, log_path, lambda: changed in log_path.read_text()), timeout=30, what=changed)
        # SIGUSR1: the application pauses and waits for the batches in hand.
        proc.send_signal(signal.SIGUSR1)
        paused = "paused; no batch in hand"
        wait_until(running(proc, log_path, lambda: paused in log_path.read_text()), timeout=30, what=paused)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        committed = committed_offsets(zk, GROUP, topic)
    log = log_path.read_text()
    assert code == 0, f"exit code {code} after SIGTERM:\n{log}"
    assert committed == ends
    result = json.loads(report.read_text())
    assert result["events"] == len(records), log
    assert result["duplicates"] == 0, log
    assert result["partitions"] == {f"{topic}[{p}]": ends[p] for p in range(PARTITIONS)}
    assert result["shutdown_clean"] is True
    assert result["stats"]["events"] == len(records)
    assert "watching" in log  # --watch started the file watcher


def test_exits_1_when_the_shutdown_times_out(cluster, zk_connect, topic_factory, produce, tmp_path) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, f"event {i}".encode()) for i in range(1000)])
    # Batches of 200 taking 4 s each; shutdown waits 1 s for the batch in hand.
    with embedded_app(cluster, zk_connect, topic, tmp_path, "--batch-delay-s", "4", shutdown_timeout_s=1) as (
        proc,
        zk,
        report,
        log_path,
    ):
        wait_until(
            running(proc, log_path, lambda: committed_offsets(zk, GROUP, topic).get(0, 0) > 0),
            timeout=90,
            what="a first batch committed",
        )
        proc.send_signal(signal.SIGTERM)  # the next batch is in hand now, for another ~4 s
        code = proc.wait(timeout=60)
    log = log_path.read_text()
    assert code == 1, f"exit code {code}, expected 1 after a shutdown timeout:\n{log}"
    assert "shutdown timed out" in log, log
    result = json.loads(report.read_text())
    assert result["shutdown_clean"] is False

"""``jetkafka run DIR`` as users start it: a process, its exit status and its log."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from jetkafka.devstack._ports import free_port
from tests.support.channels import wait_until

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetkafka", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


def write(path: Path, data: Any) -> None:
    path.write_text(yaml.safe_dump(data))


def test_an_invalid_process_yaml_stops_the_run_with_its_errors(tmp_path: Path) -> None:
    write(tmp_path / "process.yaml", {"zookeeper": {"connect": "127.0.0.1:1"}, "channel": {"group": "x"}})
    done = run("run", str(tmp_path))
    assert done.returncode == 2
    assert "process.yaml:1: channel: process.yaml holds only the sections" in done.stderr
    assert "Traceback" not in done.stderr


def test_when_no_channel_starts_the_run_ends_naming_each_file(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there: refused at once
    write(tmp_path / "process.yaml", {"zookeeper": {"connect": f"127.0.0.1:{port}"}})
    for name in ("a", "b"):
        write(
            tmp_path / f"{name}.yaml",
            {
                "kafka": {"bootstrap.servers": "127.0.0.1:9"},
                "channel": {"group": name, "topics": ["t"]},
                "processor": {"class": "jetkafka.bench._processors:CountingNoOp"},
            },
        )
    done = run("run", str(tmp_path))
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("jetkafka: error: no channel of the folder started")
    assert "a.yaml" in last and "b.yaml" in last and "connection refused" in last


def test_run_dir_serves_every_channel_and_stops_on_sigterm(
    tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, [(i % 2, f"k{i}", str(i)) for i in range(200)])
    port = free_port()
    write(
        tmp_path / "process.yaml",
        {"zookeeper": {"connect": zk_connect}, "metrics": {"port": port}, "logging": {"progress_interval_s": 1}},
    )
    tag = uuid.uuid4().hex[:6]
    for name in ("a", "b"):
        write(
            tmp_path / f"{name}.yaml",
            {
                "kafka": kafka_config,
                "channel": {"group": f"{name}-{tag}", "topics": [topic], "auto_offset_reset": "earliest"},
                "processor": {"class": "jetkafka.bench._processors:CountingNoOp"},
            },
        )
    proc = subprocess.Popen(
        [sys.executable, "-m", "jetkafka", "run", str(tmp_path)], cwd=REPO, stderr=subprocess.PIPE, text=True
    )
    try:

        def events() -> list[Any]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=5) as answer:
                    return [s["events"] for s in json.loads(answer.read())["subscriptions"]]
            except OSError:
                return []

        wait_until(lambda: events() == [200, 200], timeout=60, what="both subscriptions to read the 200 events")
        time.sleep(1.5)  # a progress line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "progress: subscriptions 2 running" in err
    for name in ("a", "b"):
        assert f"{tmp_path / name}.yaml: channel stopped" in err
    assert " ERROR " not in err, err[-3000:]


def test_run_one_file_of_a_folder_reads_and_watches_it_with_its_process_yaml(
    tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1)
    write(tmp_path / "process.yaml", {"zookeeper": {"connect": zk_connect}, "logging": {"progress_interval_s": 0}})
    body = {
        "kafka": kafka_config,
        "channel": {"group": f"one-{uuid.uuid4().hex[:6]}", "topics": [topic], "batch_max_events": 10},
        "processor": {"class": "jetkafka.bench._processors:CountingNoOp"},
    }
    path = tmp_path / "a.yaml"
    write(path, body)
    proc = subprocess.Popen([sys.executable, "-m", "jetkafka", "run", str(path)], cwd=REPO, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any(" started: consumer" in line for line in lines), timeout=60, what=f"the start: {lines[-5:]}")
        body["channel"]["batch_max_events"] = 20  # type: ignore[index]
        write(path, body)
        wait_until(lambda: any("changed:" in line for line in lines), timeout=30, what=f"the change applied: {lines[-5:]}")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = "".join(lines)
    assert f"{path} changed: in-place (channel.batch_max_events)" in log, log[-3000:]
    assert proc.returncode == 0

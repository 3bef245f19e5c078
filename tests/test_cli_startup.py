"""``jetkafka run`` while it starts and stops: one clear message on failure, signals obeyed at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.channels import channel_config, wait_until
from tests.support.processes import REPO


def _write(tmp_path: Path, config: dict) -> Path:
    config["processor"] = {"class": "tests.support.recording:FileRecorder", "options": {"path": str(tmp_path / "o")}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "jetkafka", "run", str(path), "--pythonpath", str(REPO), "--no-watch"],
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_unreachable_broker_is_one_clear_line_naming_the_timeout(tmp_path: Path, zk_connect: str) -> None:
    config = channel_config(zk_connect, {"bootstrap.servers": "127.0.0.1:1"}, ["t"])
    config["channel"]["kafka_connection_timeout_s"] = 2
    proc = _run(_write(tmp_path, config))
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) < 10, stderr
    assert "cannot reach Kafka at 127.0.0.1:1" in lines[-1] and "channel.kafka_connection_timeout_s" in lines[-1]
    assert not any("Connect to ipv4#127.0.0.1:1 failed" in line for line in lines), stderr


def test_unreachable_zookeeper_is_one_line_without_kazoo_retries(tmp_path: Path) -> None:
    config = channel_config("127.0.0.1:1", {"bootstrap.servers": "127.0.0.1:1"}, ["t"])
    config["zookeeper"]["connection_timeout_s"] = 3
    proc = _run(_write(tmp_path, config))
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) <= 2, stderr  # what it tries, and why it failed
    assert lines[-1] == (
        "jetkafka: error: cannot reach ZooKeeper at 127.0.0.1:1 within 3 s; check zookeeper.connect and that the "
        "server runs (for a local one: jetkafka dev up), or raise zookeeper.connection_timeout_s"
    )
    assert "jetkafka.zookeeper" not in stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_connecting_to_zookeeper_stops_at_once(tmp_path: Path, signum: signal.Signals) -> None:
    # A non-routable address: the connection attempt hangs rather than being refused.
    config = channel_config("10.255.255.1:2181", {"bootstrap.servers": "127.0.0.1:1"}, ["t"])
    config["zookeeper"]["connection_timeout_s"] = 120
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jetkafka", "run", str(_write(tmp_path, config)), "--pythonpath", str(REPO)],
            cwd=str(REPO),
            stderr=stderr_file,
            text=True,
        )
    try:
        wait_until(lambda: "connecting to ZooKeeper 10.255.255.1:2181" in log.read_text(), what="connecting")
        started = time.monotonic()
        proc.send_signal(signum)
        assert proc.wait(10) == 0
        assert time.monotonic() - started < 3
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = log.read_text()
    assert "Traceback" not in stderr
    assert f"{signum.name} received while starting: stopping" in stderr

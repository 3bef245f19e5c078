"""The jetkafka command as a user meets it: messages, exit codes and signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.support.channels import channel_config, values, wait_until
from tests.support.processes import REPO


def jetkafka(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetkafka", *args], capture_output=True, text=True, timeout=timeout, cwd=str(REPO), check=False
    )


def test_invalid_config_is_one_message_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "zookeeper: {connect: '127.0.0.1:2181'}\nkafka: {bootstrap.servers: 'x:1'}\n"
        "channel: {group: g, topics: [t], thread: 4}\n"
    )
    for command in ("run", "validate"):
        done = jetkafka(command, str(path))
        assert done.returncode == 2
        assert "Traceback" not in done.stderr
        assert str(path) in done.stderr and "channel.thread" in done.stderr and "threads" in done.stderr


def test_validate_accepts_the_shipped_examples() -> None:
    done = jetkafka("validate", str(REPO / "config" / "orders.yaml"))
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout


def test_unreachable_zookeeper_is_a_clear_error(tmp_path: Path, kafka_config) -> None:
    config = channel_config("127.0.0.1:1", kafka_config, ["t"])
    config["zookeeper"]["connection_timeout_s"] = 1
    config["processor"] = {"class": "tests.support.recording:FileRecorder", "options": {"path": str(tmp_path / "o")}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    done = jetkafka("run", str(path), "--pythonpath", str(REPO))
    assert done.returncode == 2
    assert "cannot reach ZooKeeper at 127.0.0.1:1" in done.stderr
    assert "Traceback" not in done.stderr


def test_processor_that_cannot_be_imported(tmp_path: Path, zk_connect, kafka_config) -> None:
    config = channel_config(zk_connect, kafka_config, ["t"])
    config["processor"] = {"class": "no_such_module:Thing"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    done = jetkafka("run", str(path))
    assert done.returncode == 2
    assert "no_such_module" in done.stderr and "--pythonpath" in done.stderr
    assert "Traceback" not in done.stderr


def test_second_interrupt_exits_at_once_without_committing(
    tmp_path: Path, zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(10, 1))
    marker = tmp_path / "batches.txt"
    config = channel_config(zk_connect, kafka_config, [topic])
    config["processor"] = {
        "class": "tests.support.slow:SlowProcessor",
        "options": {"seconds": 60, "marker": str(marker)},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jetkafka", "run", str(path), "--pythonpath", str(REPO)],
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: marker.exists() and marker.read_text().strip() != "", what="a batch in hand")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # the first interrupt waits for the batch in hand
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 130
        assert time.monotonic() - started < 10
        output = proc.stdout.read() if proc.stdout else ""
        assert "second interrupt" in output
    finally:
        if proc.poll() is None:
            proc.kill()
    # The batch in hand was not committed: the offset is still the start offset.
    assert zk.get(f"/consumers/g/offsets/{topic}/0")[0] == b"0"

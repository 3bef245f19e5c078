"""``jetkafka run`` while it starts and stops: one clear message on failure, signals obeyed at once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from tests.support.channels import channel_config, values, wait_until
from tests.support.processes import REPO
from tests.support.recording import read_deliveries


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
        assert proc.wait(10) == 0, log.read_text()[-3000:]
        assert time.monotonic() - started < 3
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = log.read_text()
    assert "Traceback" not in stderr
    assert f"{signum.name} received while starting: stopping" in stderr


# -- ZooKeeper auth ------------------------------------------------------------------------------------------


def _jetkafka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetkafka", *args], capture_output=True, text=True, timeout=60, cwd=str(REPO), check=False
    )


def _protected(zk_connect: str, path: str) -> None:
    """Creates ``path`` (under the test's chroot) readable and writable by app:s3cret only."""
    client = KazooClient(hosts=zk_connect, auth_data=[("digest", "app:s3cret")])
    client.start(timeout=10)
    try:
        client.create(path, makepath=True, acl=[make_digest_acl("app", "s3cret", all=True)])
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("auth", [None, {"credential": "app:guess"}])
def test_a_protected_chroot_without_the_credential_is_one_message(
    tmp_path: Path, zk_connect: str, auth: dict | None
) -> None:
    _protected(zk_connect, "/locked")
    config = channel_config(f"{zk_connect}/locked", {"bootstrap.servers": "127.0.0.1:1"}, ["t"])
    if auth:
        config["zookeeper"]["auth"] = auth
    path = _write(tmp_path, config)
    chroot = zk_connect.partition("/")[2] + "/locked"
    for command in (["run", str(path), "--no-watch"], ["pause", "--config", str(path)], ["status", "--config", str(path)]):
        done = _jetkafka(*command)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert f"ZooKeeper denied access to chroot /{chroot}" in last and "zookeeper.auth.credential" in last
        assert ("zookeeper.auth is not set" in last) == (auth is None)


def test_protected_group_nodes_in_an_open_chroot_are_one_message(tmp_path: Path, zk_connect: str) -> None:
    _protected(zk_connect, "/consumers/g")
    path = _write(tmp_path, channel_config(zk_connect, {"bootstrap.servers": "127.0.0.1:1"}, ["t"]))
    done = _jetkafka("pause", "--config", str(path))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "ZooKeeper denied access to chroot" in done.stderr and "zookeeper.auth is not set" in done.stderr


# -- a run as its log shows it ---------------------------------------------------------------------------------


def test_a_json_run_logs_progress_and_a_summary_and_no_error_on_sigterm(
    tmp_path: Path, zk_connect: str, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(20, 2))
    out = tmp_path / "o"
    config = channel_config(zk_connect, kafka_config, [topic])
    config["processor"] = {
        "class": "tests.support.recording:FileRecorder",
        "options": {"path": str(out), "log_batches": True},
    }
    config["logging"] = {"format": "json", "progress_interval_s": 1}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jetkafka", "run", str(path), "--pythonpath", str(REPO)],  # watching the file
            cwd=str(REPO),
            stderr=stderr_file,
            text=True,
        )
    try:
        wait_until(lambda: out.exists() and len(read_deliveries(str(out))) == 20, what="20 deliveries")
        wait_until(lambda: "lag 0 events" in log.read_text(), what="a progress line after the deliveries")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    entries = [json.loads(line) for line in log.read_text().splitlines()]  # every line is one object
    assert not [e for e in entries if e["level"] in ("ERROR", "CRITICAL")], entries
    recorded = [e for e in entries if e["message"].startswith("recorded ")]
    assert recorded and all(e["topic"] == topic and e["partition"] in (0, 1) for e in recorded)
    assert sorted(e["offset"] for e in recorded if e["partition"] == 0)[0] == 0
    progress = [e["message"] for e in entries if e["logger"] == "jetkafka.progress"]
    assert any("2 partitions held; lag 0 events" in m for m in progress), progress
    (stopped,) = [e["message"] for e in entries if " stopped: " in e["message"]]
    assert "20 events in" in stopped and "{" not in stopped

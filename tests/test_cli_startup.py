"""``jetkafka run`` while it starts and stops: one clear message on failure, signals obeyed at once."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from jetkafka.coordination._server_probe import Outcome, ServerAnswer, probe_servers
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


def _since(line_start: str, stderr: str, ended: datetime) -> float:
    """Seconds from the log line that starts with ``line_start`` (after its time) to ``ended``."""
    (stamp,) = [line[:23] for line in stderr.splitlines() if line[24:].lstrip().startswith("INFO") and line_start in line]
    return (ended - datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")).total_seconds()


def _failed_start(tmp_path: Path, config: dict) -> tuple[str, datetime]:
    """Runs ``config`` to its failure: the last line of stderr (the one message), and when it ended."""
    proc = _run(_write(tmp_path, config))
    _, stderr = proc.communicate(timeout=120)
    ended = datetime.now()
    assert proc.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert "jetkafka.zookeeper" not in stderr  # none of kazoo's per-attempt records
    lines = stderr.strip().splitlines()
    assert len(lines) <= 2, stderr  # what it tries, and why it failed
    return stderr, ended


@contextmanager
def _listener(accepts: bool) -> Iterator[str]:
    """A local address that never answers: its connections are accepted and then get nothing
    (``accepts``), or they are never accepted, as on a path that drops packets."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    address = server.getsockname()
    fillers: list[socket.socket] = []
    if accepts:
        server.listen(8)  # the kernel accepts; nobody reads or answers
    else:
        # An accept queue that is full: the kernel drops every further connection attempt unanswered.
        server.listen(0)
        for _ in range(2):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(address)
            fillers.append(filler)
        time.sleep(0.2)
    try:
        yield f"{address[0]}:{address[1]}"
    finally:
        for filler in fillers:
            filler.close()
        server.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_zookeeper_port_is_reported_at_once_with_its_cause(tmp_path: Path) -> None:
    port = _closed_port()
    config = channel_config(f"127.0.0.1:{port}", {"bootstrap.servers": "127.0.0.1:1"}, ["t"])
    config["zookeeper"]["connection_timeout_s"] = 30
    stderr, ended = _failed_start(tmp_path, config)
    assert stderr.strip().splitlines()[-1] == (
        f"jetkafka: error: cannot reach ZooKeeper at 127.0.0.1:{port}: connection refused (nothing listens on that "
        "port); check zookeeper.connect and that the server runs (for a local one: jetkafka dev up)"
    )
    assert _since("connecting to ZooKeeper", stderr, ended) < 2  # not the 30 s of the timeout


def test_several_servers_fail_at_once_only_when_every_one_refuses(tmp_path: Path, zk_connect: str) -> None:
    refusing = [f"127.0.0.1:{_closed_port()}", f"127.0.0.1:{_closed_port()}"]
    config = channel_config(",".join(refusing), {"bootstrap.servers": "127.0.0.1:1"}, ["t"])
    config["zookeeper"]["connection_timeout_s"] = 30
    stderr, ended = _failed_start(tmp_path, config)
    assert stderr.strip().splitlines()[-1] == (
        f"jetkafka: error: cannot reach ZooKeeper at {','.join(refusing)}: "
        f"{refusing[0]}: connection refused (nothing listens on that port); "
        f"{refusing[1]}: connection refused (nothing listens on that port); "
        "check zookeeper.connect and that the servers run (for a local one: jetkafka dev up)"
    )
    assert _since("connecting to ZooKeeper", stderr, ended) < 2
    # One server that answers is enough: the refusing one does not fail the start.
    hosts, _, chroot = zk_connect.partition("/")
    config = channel_config(f"{refusing[0]},{hosts}/{chroot}", {"bootstrap.servers": "127.0.0.1:1"}, ["t"])
    config["channel"]["kafka_connection_timeout_s"] = 1
    proc = _run(_write(tmp_path, config))
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2, stderr
    assert "connected to ZooKeeper" in stderr and "cannot reach Kafka at 127.0.0.1:1" in stderr.splitlines()[-1]


@pytest.mark.parametrize(
    ("accepts", "found", "fix"),
    [
        (
            False,
            "no answer to the connection (an unroutable address, or a firewall dropping the packets)",
            "check zookeeper.connect and the network path to the server, or raise zookeeper.connection_timeout_s",
        ),
        (
            True,
            "accepted the connection, then answered nothing (a hung server, or another service's port)",
            "check zookeeper.connect and the network path to the server, or raise zookeeper.connection_timeout_s",
        ),
    ],
    ids=["never-accepted", "accepted-never-answered"],
)
def test_a_zookeeper_address_that_does_not_answer_fails_after_the_timeout_it_names(
    tmp_path: Path, accepts: bool, found: str, fix: str
) -> None:
    with _listener(accepts) as address:
        config = channel_config(address, {"bootstrap.servers": "127.0.0.1:1"}, ["t"])
        config["zookeeper"]["connection_timeout_s"] = 3
        stderr, ended = _failed_start(tmp_path, config)
    assert stderr.strip().splitlines()[-1] == (
        f"jetkafka: error: cannot reach ZooKeeper at {address} within 3 s: {found}; {fix}"
    )
    assert 3 <= _since("connecting to ZooKeeper", stderr, ended) < 4.5


def test_the_brokers_port_given_as_zookeepers_is_named_as_such(tmp_path: Path, kafka_config: dict) -> None:
    broker = kafka_config["bootstrap.servers"].split(",")[0]
    config = channel_config(broker, {"bootstrap.servers": "127.0.0.1:1"}, ["t"])
    config["zookeeper"]["connection_timeout_s"] = 3
    stderr, ended = _failed_start(tmp_path, config)
    assert stderr.strip().splitlines()[-1] == (
        f"jetkafka: error: cannot reach ZooKeeper at {broker} within 3 s: not a ZooKeeper server: it closed the "
        "connection at ZooKeeper's srvr request without an answer (another service's port, such as a Kafka "
        "broker's?); check zookeeper.connect: it names ZooKeeper's client port (2181 unless the server's "
        "clientPort says otherwise)"
    )
    assert 3 <= _since("connecting to ZooKeeper", stderr, ended) < 4.5


def test_the_probe_tells_zookeeper_from_what_is_not(zk_connect: str) -> None:
    hosts = zk_connect.partition("/")[0]
    refused = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    assert probe_servers(f"{refused},{hosts}", 10) == [
        ServerAnswer(refused, Outcome.REFUSED, "Connection refused"),
        ServerAnswer(hosts, Outcome.ZOOKEEPER),
    ]
    assert time.monotonic() - started < 1  # the first ZooKeeper answer ends it
    (unknown,) = probe_servers("no-such-host.invalid:2181", 10)
    assert unknown.outcome == Outcome.UNRESOLVED
    with socket.socket() as server:  # a service that answers with its own protocol's error
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        address = "{}:{}".format(*server.getsockname())

        def answer() -> None:
            conn, _ = server.accept()
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

        threading.Thread(target=answer, daemon=True).start()
        (http,) = probe_servers(address, 10)
    assert http == ServerAnswer(
        address, Outcome.NOT_ZOOKEEPER, "it answered ZooKeeper's srvr request with b'HTTP/1.1 400 Bad Request\\r\\n\\r\\n'"
    )


def test_an_unreachable_broker_with_metrics_on_fails_after_the_timeout_it_names(tmp_path: Path, zk_connect: str) -> None:
    # The metrics' watermark thread asks the broker too (5 s a look-up): the start's look-up used
    # to wait for it first, then its own full timeout.
    config = channel_config(zk_connect, {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}, ["t"])
    config["channel"]["kafka_connection_timeout_s"] = 6
    config["metrics"] = {"port": 0}
    proc = _run(_write(tmp_path, config))
    _, stderr = proc.communicate(timeout=120)
    ended = datetime.now()
    assert proc.returncode == 2, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("jetkafka: error: cannot reach Kafka at 127.0.0.1:") and " within 6 s (" in last, stderr
    assert 6 <= _since("connected to ZooKeeper", stderr, ended) < 7.5, stderr


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

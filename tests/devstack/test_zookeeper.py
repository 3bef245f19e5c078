"""The local ZooKeeper server and ensemble: real JVMs, real kazoo clients."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import psutil
import pytest
from kazoo.client import KazooClient

from jetkafka.devstack import ZooKeeperEnsemble, ZooKeeperServer
from jetkafka.devstack._process import ProcessRecord
from jetkafka.errors import DevStackError

# Starts servers of its own: a live ZooKeeper and broker (see tests/conftest.py).
pytestmark = pytest.mark.cluster


def _kazoo(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    return client


def test_standalone_server_serves_kazoo_and_stops(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk")
    started = time.monotonic()
    server.start()
    elapsed = time.monotonic() - started
    try:
        assert server.is_running()
        assert server.mode() == "standalone"
        assert elapsed < 15, f"start took {elapsed:.1f} s"
        pid_file = json.loads((tmp_path / "zk" / "zookeeper.pid").read_text())
        assert pid_file["pid"] == server.pid

        client = _kazoo(server.connect_string)
        try:
            client.create("/jobs/a", b"payload", makepath=True)
            assert client.get("/jobs/a")[0] == b"payload"
            assert client.get_children("/jobs") == ["a"]
        finally:
            client.stop()
            client.close()
    finally:
        pid = server.pid
        server.stop()
    assert not server.is_running()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not (tmp_path / "zk" / "zookeeper.pid").exists()
    log_text = (tmp_path / "zk" / "zookeeper.log").read_text()
    assert "INFO" in log_text and "DEBUG" not in log_text


def test_data_survives_a_restart(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    try:
        client = _kazoo(server.connect_string)
        client.create("/kept", b"1")
        client.stop()
        client.close()
        server.kill()
        assert not server.is_running()
        server.start()
        client = _kazoo(server.connect_string)
        assert client.get("/kept")[0] == b"1"
        client.stop()
        client.close()
    finally:
        server.stop()


def test_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        server = ZooKeeperServer(tmp_path / "zk", port)
        with pytest.raises(DevStackError) as caught:
            server.start()
    assert str(caught.value) == (
        f"port {port} on 127.0.0.1 is taken by another process; "
        "pick another with --zookeeper-port or stop that process"
    )
    assert not server.is_running()


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(DevStackError) as caught:
        ZooKeeperServer(tmp_path / "zk").start()
    assert str(caught.value) == (
        "java not found on PATH: install a Java runtime, 11 or newer for ZooKeeper (17 or newer "
        "to run Spark too: apt-get install openjdk-17-jre-headless), or set JAVA_HOME"
    )


def test_early_exit_reports_the_log_tail(tmp_path: Path) -> None:
    # A heap below the JVM's minimum makes it exit at once, like any broken installation would.
    server = ZooKeeperServer(tmp_path / "zk", heap="1k")
    with pytest.raises(DevStackError) as caught:
        server.start(timeout=20)
    message = str(caught.value)
    assert "zookeeper exited during start-up" in message
    assert "heap" in message.lower()
    assert not server.is_running()


def test_recycled_pid_is_not_taken_for_the_server(tmp_path: Path) -> None:
    directory = tmp_path / "zk"
    directory.mkdir()
    me = ProcessRecord.of(os.getpid())
    # Our own (live) pid, but a start time that is not ours: a recycled pid.
    (directory / "zookeeper.pid").write_text(
        json.dumps({"pid": me.pid, "create_time": me.create_time - 1000})
    )
    server = ZooKeeperServer(directory)
    assert not server.is_running()
    server.stop()  # must not signal this test process
    assert me.is_alive()


def test_a_stepped_wall_clock_does_not_disown_the_server() -> None:
    me = ProcessRecord.of(os.getpid())
    assert me.boot_time is not None
    # The wall clock was stepped by ten minutes after the record was taken.
    assert ProcessRecord(me.pid, me.create_time - 600, me.boot_time - 600).is_alive()
    assert not ProcessRecord(me.pid, me.create_time - 600, me.boot_time).is_alive()
    assert ProcessRecord.from_dict(me.to_dict()) == me


@pytest.mark.slow
def test_ensemble_serves_with_one_member_stopped(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path, size=3)
    started = time.monotonic()
    ensemble.start()
    try:
        assert time.monotonic() - started < 30
        modes = sorted(s.mode() or "-" for s in ensemble.servers)
        assert modes == ["follower", "follower", "leader"]
        assert len(ensemble.connect_string.split(",")) == 3

        client = _kazoo(ensemble.connect_string)
        try:
            client.create("/before", b"1")
            leader = ensemble.leader()
            assert leader is not None
            leader.stop()
            assert len(ensemble.running()) == 2

            # The survivors elect a new leader; kazoo reconnects and writes go through.
            deadline = time.monotonic() + 30
            while ensemble.leader() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            client.retry(client.create, "/after", b"2")
            assert sorted(client.get_children("/")) == ["after", "before", "zookeeper"]

            leader.start()
            assert leader.mode() in ("follower", "leader")
            assert client.get("/after")[0] == b"2"
        finally:
            client.stop()
            client.close()
    finally:
        ensemble.stop()
    assert ensemble.running() == []

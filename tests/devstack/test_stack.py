"""DevStack and the ``jetkafka dev`` command: idempotent up, status, down, detached servers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from jetkafka.cli import main
from jetkafka.devstack import DevStack, default_state_dir
from jetkafka.errors import DevStackError

# Starts servers of its own: a live ZooKeeper and broker (see tests/conftest.py).
pytestmark = pytest.mark.cluster


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _dev(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetkafka", "dev", *args],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )


def test_up_is_idempotent_and_revives_a_dead_server(tmp_path: Path) -> None:
    stack = DevStack(tmp_path / "state")
    try:
        first = stack.up()
        status = stack.status()
        assert status["zookeeper"]["running"] and status["broker"]["running"]
        pids = {name: status[name]["pid"] for name in ("zookeeper", "broker")}
        assert status["zookeeper"]["address"] == first.zookeeper
        assert status["broker"]["address"] == first.bootstrap_servers

        # A second up, from a fresh object as a second `jetkafka dev up` would be, changes nothing.
        again = DevStack(tmp_path / "state")
        assert again.up() == first
        assert {n: again.status()[n]["pid"] for n in pids} == pids

        saved = json.loads((tmp_path / "state" / "stack.json").read_text())
        assert saved["broker"]["pid"] == pids["broker"]
        assert saved["broker"]["create_time"] == pytest.approx(psutil.Process(pids["broker"]).create_time())

        # The broker crashes: the next up restarts it on the same port and leaves ZooKeeper be.
        psutil.Process(pids["broker"]).kill()
        psutil.Process(pids["broker"]).wait(10)
        assert not stack.status()["broker"]["running"]
        revived = stack.up()
        assert revived == first
        status = stack.status()
        assert status["zookeeper"]["pid"] == pids["zookeeper"]
        assert status["broker"]["running"] and status["broker"]["pid"] != pids["broker"]
        pids["broker"] = status["broker"]["pid"]
    finally:
        stopped = stack.down()
    assert sorted(stopped) == ["broker", "zookeeper"]
    assert all(_gone(pid) for pid in pids.values())
    status = stack.status()
    assert not status["zookeeper"]["running"] and not status["broker"]["running"]
    assert stack.down() == []


def test_recycled_pid_in_the_state_file_is_not_ours(tmp_path: Path) -> None:
    me = psutil.Process(os.getpid())
    entry = {"host": "127.0.0.1", "port": 1, "pid": me.pid, "create_time": me.create_time() - 500,
             "started_at": "2020-01-01T00:00:00+0000"}
    state = tmp_path / "state"
    state.mkdir()
    (state / "stack.json").write_text(json.dumps({"version": 1, "zookeeper": entry, "broker": entry}))
    stack = DevStack(state)
    status = stack.status()
    assert not status["zookeeper"]["running"] and status["zookeeper"]["pid"] is None
    assert stack.info() is None
    assert stack.down() == []  # and this test process was not signalled


def test_asking_for_another_port_while_running_is_refused(tmp_path: Path) -> None:
    stack = DevStack(tmp_path / "state")
    try:
        info = stack.up()
        with pytest.raises(DevStackError) as caught:
            stack.up(zookeeper_port=int(info.zookeeper.rsplit(":", 1)[1]) + 1)
        assert "jetkafka dev down" in str(caught.value)
    finally:
        stack.down()


def test_dev_command_round_trip_in_subprocesses(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    up = _dev("up", "--state-dir", state, "--json")
    assert up.returncode == 0, up.stderr
    addresses = json.loads(up.stdout)
    assert set(addresses) == {"zookeeper", "bootstrap_servers"}
    try:
        # `up` has exited; the servers it started keep serving.
        for address in addresses.values():
            host, port = address.rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=5).close()

        status = _dev("status", "--state-dir", state, "--json")
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["zookeeper"]["address"] == addresses["zookeeper"]
        assert report["broker"]["address"] == addresses["bootstrap_servers"]
        pids = [report["zookeeper"]["pid"], report["broker"]["pid"]]

        table = _dev("status", "--state-dir", state)
        assert table.returncode == 0
        assert "zookeeper" in table.stdout and addresses["bootstrap_servers"] in table.stdout
    finally:
        down = _dev("down", "--state-dir", state)
    assert down.returncode == 0, down.stderr
    assert "stopped broker, zookeeper" in down.stdout
    assert all(_gone(pid) for pid in pids)
    assert _dev("status", "--state-dir", state).returncode == 3


def test_up_json_prints_exactly_the_two_addresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "state")
    try:
        assert main(["dev", "up", "--state-dir", state, "--json"]) == 0
        printed = capsys.readouterr().out
        assert list(json.loads(printed)) == ["zookeeper", "bootstrap_servers"]
        assert printed.count("\n") == 1
    finally:
        assert main(["dev", "down", "--state-dir", state]) == 0


def test_taken_port_fails_up_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code = main(["dev", "up", "--state-dir", str(tmp_path), "--zookeeper-port", str(port)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is taken by another process; pick another with --zookeeper-port" in err
    assert not DevStack(tmp_path).status()["broker"]["running"]


def test_state_dir_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JETKAFKA_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_state_dir() == tmp_path / ".jetkafka" / "devstack"
    assert DevStack().state_dir == tmp_path / ".jetkafka" / "devstack"
    monkeypatch.setenv("JETKAFKA_STATE_DIR", str(tmp_path / "elsewhere"))
    assert DevStack().state_dir == tmp_path / "elsewhere"

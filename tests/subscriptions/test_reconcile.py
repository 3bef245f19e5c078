"""How a ChannelFolder follows its folder, with channels that only record what they are told.

No servers: ``build`` makes a stand-in that records each start, hot deploy and shutdown, and
can be made slow or refuse a change, so each rule of reconciliation is seen alone.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from jetkafka.channel._hot_deploy import Change, plan_change
from jetkafka.config import JetkafkaConfig
from jetkafka.subscriptions import ChannelFolder
from jetkafka.subscriptions import _channel_folder as channel_folder
from tests.support.channels import wait_until

KAFKA = {"bootstrap.servers": "127.0.0.1:9"}
ZK = {"connect": "127.0.0.1:2181/a"}


class StandIn:
    """Records what the folder does to it; ``start_s`` makes its start slow, ``reject`` its hot deploys."""

    def __init__(self, config: JetkafkaConfig, log: list[tuple[str, str]], start_s: float = 0.0, reject: bool = False) -> None:
        self.config = config
        self.running = False
        self.shutdown_clean: bool | None = None
        self._log, self._start_s, self._reject = log, start_s, reject

    @property
    def name(self) -> str:
        return Path(self.config.source).name

    def start(self) -> None:
        time.sleep(self._start_s)
        self.running = True
        self._log.append(("start", self.name))

    def reconfigure(self, new: JetkafkaConfig) -> Change:
        change = plan_change(self.config, new)
        if self._reject:
            self._log.append(("rejected", self.name))
            return Change("rejected", change.keys)
        self.config = new
        self._log.append((change.kind, self.name))
        return change

    def shutdown(self, timeout: float | None = None) -> bool:
        self.running = False
        self.shutdown_clean = True
        self._log.append(("stop", self.name))
        return True


def write(folder: Path, name: str, group: str, **sections: Any) -> None:
    tmp = folder / f".{name}.tmp"
    tmp.write_text(yaml.safe_dump({"kafka": KAFKA, "channel": {"group": group, "topics": ["t"]}, **sections}))
    tmp.rename(folder / name)


@pytest.fixture
def log() -> list[tuple[str, str]]:
    return []


def folder_of(path: Path, log: list[tuple[str, str]], **stand_in: Any) -> ChannelFolder:
    return ChannelFolder(path, lambda config: StandIn(config, log, **stand_in))  # type: ignore[arg-type,return-value]


def test_reading_the_folder_again_does_not_repeat_a_rejected_change(
    tmp_path: Path, log: list[tuple[str, str]]
) -> None:
    (tmp_path / "process.yaml").write_text(yaml.safe_dump({"zookeeper": ZK}))
    write(tmp_path, "a.yaml", "a")
    folder = folder_of(tmp_path, log, reject=True)
    folder.start(watch=False)
    write(tmp_path, "a.yaml", "a", channel={"group": "a", "topics": ["t"], "threads": 3})
    for _ in range(3):  # the watch's call, then two rescans
        folder.reconcile()
        folder.wait_settled(5)
    assert log == [("start", "a.yaml"), ("rejected", "a.yaml")]
    assert folder.shutdown(5)


def test_shutdown_waits_for_a_start_in_progress_and_stops_it(tmp_path: Path, log: list[tuple[str, str]]) -> None:
    (tmp_path / "process.yaml").write_text(yaml.safe_dump({"zookeeper": ZK}))
    write(tmp_path, "a.yaml", "a")
    folder = folder_of(tmp_path, log, start_s=1.0)
    interrupted = threading.Event()
    interrupted.set()  # a SIGTERM while it starts: start() returns at once
    folder.start(watch=False, interrupted=interrupted)
    assert log == []
    assert folder.shutdown(10) is True
    assert log == [("start", "a.yaml"), ("stop", "a.yaml")]


def test_an_empty_folder_takes_its_shared_settings_from_the_first_file_that_comes(
    tmp_path: Path, log: list[tuple[str, str]]
) -> None:
    folder = folder_of(tmp_path, log)
    folder.start(watch=False)
    write(tmp_path, "b.yaml", "b", zookeeper=ZK)
    folder.reconcile()
    folder.wait_settled(5)
    write(tmp_path, "a.yaml", "a", zookeeper={"connect": "127.0.0.1:2181/other"})
    folder.reconcile()
    folder.wait_settled(5)
    states = {Path(s.file).name: s for s in folder.statuses()}
    assert states["b.yaml"].state == "running"
    assert states["a.yaml"].state == "invalid" and "b.yaml" in states["a.yaml"].reason
    assert folder.shutdown(5)


def test_the_file_that_gave_a_shared_section_cannot_move_it_alone(tmp_path: Path, log: list[tuple[str, str]]) -> None:
    write(tmp_path, "a.yaml", "a", zookeeper=ZK)
    write(tmp_path, "b.yaml", "b", zookeeper=ZK)
    folder = folder_of(tmp_path, log)
    folder.start(watch=False)
    write(tmp_path, "a.yaml", "a", zookeeper={"connect": "127.0.0.1:2181/other"})
    folder.reconcile()
    folder.wait_settled(5)
    assert ("resubscribe", "a.yaml") not in log
    a = next(c for c in folder.channels() if c.config.channel.group == "a")
    assert a.config.zookeeper.connect == "127.0.0.1:2181/a"  # still on the process's
    assert folder.shutdown(5)


def test_a_section_taken_out_of_process_yaml_goes_back_to_the_files(tmp_path: Path, log: list[tuple[str, str]]) -> None:
    (tmp_path / "process.yaml").write_text(yaml.safe_dump({"zookeeper": ZK, "logging": {"level": "DEBUG"}}))
    write(tmp_path, "a.yaml", "a")
    write(tmp_path, "b.yaml", "b")
    folder = folder_of(tmp_path, log)
    folder.start(watch=False)
    (tmp_path / "process.yaml").write_text(yaml.safe_dump({"zookeeper": ZK}))
    folder.reconcile()
    folder.wait_settled(5)
    assert {s.state for s in folder.statuses()} == {"running"}
    assert sorted(kind for kind, _ in log if kind != "start") == ["in-place", "in-place"]
    assert all(c.config.logging.level == "INFO" for c in folder.channels())
    assert folder.shutdown(5)


def test_a_renamed_file_starts_once_the_old_name_has_let_its_group_go(
    tmp_path: Path, log: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "process.yaml").write_text(yaml.safe_dump({"zookeeper": ZK}))
    write(tmp_path, "orders.yaml", "g")
    folder = folder_of(tmp_path, log)
    folder.start(watch=False)
    (tmp_path / "orders.yaml").rename(tmp_path / "orders-v2.yaml")
    folder.reconcile()  # the old one stops; the new one waits for the group
    wait_until(lambda: ("start", "orders-v2.yaml") in log, timeout=5, what="the renamed file's channel")
    assert log == [("start", "orders.yaml"), ("stop", "orders.yaml"), ("start", "orders-v2.yaml")]
    assert folder.shutdown(5)


def test_a_removed_file_leaves_no_status_behind(tmp_path: Path, log: list[tuple[str, str]]) -> None:
    (tmp_path / "process.yaml").write_text(yaml.safe_dump({"zookeeper": ZK}))
    write(tmp_path, "a.yaml", "a")
    write(tmp_path, "b.yaml", "b")
    folder = folder_of(tmp_path, log)
    folder.start(watch=False)
    (tmp_path / "b.yaml").unlink()
    folder.reconcile()
    folder.wait_settled(5)
    folder.reconcile()
    assert [Path(s.file).name for s in folder.statuses()] == ["a.yaml"]
    assert folder.shutdown(5)


def test_a_failed_start_is_retried_on_its_timer_not_at_each_reading(
    tmp_path: Path, log: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[float] = []

    def failing(config: JetkafkaConfig) -> Any:
        attempts.append(time.monotonic())
        raise RuntimeError("the broker is not there")

    monkeypatch.setattr("jetkafka.subscriptions._subscription.RETRY_S", 1.5)
    (tmp_path / "process.yaml").write_text(yaml.safe_dump({"zookeeper": ZK}))
    write(tmp_path, "a.yaml", "a")
    folder = ChannelFolder(tmp_path, failing)
    folder.start(watch=False)
    for _ in range(5):
        folder.reconcile()
    assert len(attempts) == 1
    wait_until(lambda: len(attempts) == 2, timeout=5, what="the retry")
    assert attempts[1] - attempts[0] >= 1.4
    assert folder.statuses()[0].state == "failed"
    assert folder.shutdown(5)
    assert channel_folder.RESCAN_S == 10.0

"""The watch recipes (jetkafka.coordination._watches) on a real ZooKeeper, with real faults."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from jetkafka.coordination._watches import ChildrenWatch, NodeWatch
from tests.support.group_watch import started_client, stop_client
from tests.support.zk_faults import expire_session


class Seen:
    """What a watch reported, in order, for a test to wait on."""

    def __init__(self) -> None:
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.threads: set[str] = set()

    def __call__(self, *state: Any) -> None:
        self.threads.add(threading.current_thread().name)
        self.items.put(state[0] if len(state) == 1 else state)

    def next(self, timeout: float = 10.0) -> Any:
        return self.items.get(timeout=timeout)

    def until(self, wanted: Any, timeout: float = 10.0) -> None:
        """Wait until ``wanted`` is reported (states in between are the watch's to report)."""
        while self.next(timeout) != wanted:
            pass

    def none_within(self, timeout: float) -> bool:
        try:
            self.items.get(timeout=timeout)
        except queue.Empty:
            return True
        return False


@pytest.fixture
def watcher(zk_connect: str) -> Iterator[KazooClient]:
    client = started_client(zk_connect, timeout=10)
    yield client
    stop_client(client)


@pytest.fixture
def thread_failures(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(f"{args.exc_type.__name__}: {args.exc_value}"))
    return seen


def test_children_watch_reports_every_change_also_after_the_session_expired(
    zk: KazooClient, watcher: KazooClient, thread_failures: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    seen = Seen()
    watch = ChildrenWatch(watcher, "/ids", seen).start()
    assert seen.next() == []  # the node does not exist yet: its creation is watched
    zk.create("/ids/a", makepath=True)
    seen.until(["a"])  # the parent's creation may be reported first, as []
    zk.create("/ids/b")
    assert seen.next() == ["a", "b"]
    expire_session(watcher)
    zk.delete("/ids/a")
    seen.until(["b"])  # the re-read on the new session may report ["a", "b"] first
    zk.create("/ids/c")
    assert seen.next() == ["b", "c"]
    watch.stop()
    zk.create("/ids/d")
    assert seen.none_within(1.0), "a stopped watch reported"
    assert thread_failures == []
    assert not [r for r in caplog.records if r.exc_info]


def test_node_watch_reports_creation_changes_and_deletion_also_after_the_session_expired(
    zk: KazooClient, watcher: KazooClient, thread_failures: list[str]
) -> None:
    seen = Seen()
    watch = NodeWatch(watcher, "/marker", seen).start()
    assert seen.next() == (None, None)
    zk.create("/marker", b"1")
    data, stat = seen.next()
    assert data == b"1" and stat is not None
    expire_session(watcher)
    zk.set("/marker", b"2")
    while seen.next()[0] != b"2":  # the re-read on the new session may report "1" first
        pass
    zk.delete("/marker")
    assert seen.next() == (None, None)
    watch.stop()
    assert thread_failures == []


def test_a_failed_read_is_retried_after_a_back_off_with_one_warning(
    zk_connect: str, zk: KazooClient, thread_failures: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="jetkafka.coordination._watches")
    zk.add_auth("digest", "owner:secret")
    zk.create("/locked", b"x", acl=[make_digest_acl("owner", "secret", all=True)])
    anonymous = started_client(zk_connect, timeout=10)
    try:
        seen = Seen()
        watch = NodeWatch(anonymous, "/locked", seen).start()  # NoAuth: nothing reported
        assert seen.none_within(0.3)
        zk.set_acls("/locked", OPEN_ACL_UNSAFE)
        data, _ = seen.next(timeout=5)
        assert data == b"x"
        watch.stop()
    finally:
        stop_client(anonymous)
    warnings = [r for r in caplog.records if r.name == "jetkafka.coordination._watches"]
    assert warnings, "the failed read was not reported"
    assert all("NoAuthError" in r.getMessage() and "/locked" in r.getMessage() and not r.exc_info for r in warnings)
    assert thread_failures == []


def test_an_on_change_that_raises_is_logged_and_called_again(
    zk: KazooClient, watcher: KazooClient, thread_failures: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="jetkafka.coordination._watches")
    calls: list[list[str]] = []
    delivered = threading.Event()

    def flaky(children: list[str]) -> None:
        calls.append(children)
        if len(calls) == 2:
            raise RuntimeError("on_change failed (injected)")
        if len(calls) == 3:
            delivered.set()

    zk.ensure_path("/flaky")
    watch = ChildrenWatch(watcher, "/flaky", flaky).start()
    zk.create("/flaky/a")
    assert delivered.wait(5)
    watch.stop()
    assert calls == [[], ["a"], ["a"]]
    assert [r.getMessage() for r in caplog.records if "RuntimeError" in r.getMessage()]
    assert not [r for r in caplog.records if r.exc_info]
    assert thread_failures == []

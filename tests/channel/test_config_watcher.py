"""ConfigWatcher's life cycle: starting and stopping it leaves no ERROR in the log."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from jetkafka.channel._hot_deploy import ConfigWatcher


def test_watchdogs_stop_race_is_not_logged_as_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("x: 1\n")
    ConfigWatcher(path, lambda config: None)
    with caplog.at_level(logging.INFO):
        # What watchdog's inotify emitter logs when stop() closes inotify during its read.
        logging.getLogger("watchdog.observers.inotify").error(
            "InotifyEmitter.queue_events() called when the thread is inactive"
        )
        logging.getLogger("watchdog.observers.inotify").error("another error")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == ["another error"]


def test_stopping_a_watcher_while_events_arrive_logs_no_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("x: 1\n")
    with caplog.at_level(logging.DEBUG):
        for i in range(20):
            # The file is read once as the watch starts: a loader that takes it as it is.
            watcher = ConfigWatcher(path, lambda config: None, load=lambda _: None)  # type: ignore[arg-type,return-value]
            watcher.start()
            (tmp_path / f"other-{i}").write_text("y")  # an event in the emitter's read as it stops
            watcher.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_an_edit_saved_before_the_watch_began_is_applied_when_it_begins(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("version: 1\n")
    applied: list[str] = []
    # The channel read version 1; the watcher is built after it, and the edit comes before the
    # watch begins (a user saving right after `jetkafka run`): no later write would bring it.
    watcher = ConfigWatcher(path, applied.append, load=lambda p: Path(p).read_text())  # type: ignore[arg-type]
    path.write_text("version: 2\n")
    watcher.start()
    try:
        assert applied == ["version: 2\n"]
    finally:
        watcher.stop()

"""DirectoryWatch: one call after each burst of changes to chosen files of a directory.

watchdog reports every event of the directory (not of its subdirectories): a file written,
created, deleted or renamed into or out of it, which covers editors that write a temporary
file and rename it over the original. ``counts(path)`` says which paths matter; the call comes
on a timer thread (``jetkafka-hot-deploy``) ``debounce_s`` after the last event of a burst,
one call at a time. Used by the hot deploy of one file (:mod:`jetkafka.channel._hot_deploy`)
and of a folder of them (:mod:`jetkafka.subscriptions`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

log = logging.getLogger("jetkafka.hot_deploy")


class _Events(FileSystemEventHandler):
    def __init__(self, counts: Callable[[str], bool], changed: Callable[[], None]) -> None:
        self._counts = counts
        self._changed = changed

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return  # reads, ours included
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if p and self._counts(os.fsdecode(p)):
                self._changed()
                return


class _InotifyStopRace(logging.Filter):
    """Lowers watchdog's "queue_events() called when the thread is inactive" to DEBUG.

    watchdog's inotify emitter logs it at ERROR when :meth:`DirectoryWatch.stop` closes the
    inotify handle while the emitter thread is still in its blocking read: a race inside
    watchdog, harmless (the thread just ends), that would put an ERROR line in the log of every
    unlucky clean shutdown.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and "called when the thread is inactive" in str(record.msg):
            record.levelno = logging.DEBUG
            record.levelname = logging.getLevelName(logging.DEBUG)
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _quiet_the_stop_race() -> None:
    watchdog_log = logging.getLogger("watchdog.observers.inotify")
    if not any(isinstance(f, _InotifyStopRace) for f in watchdog_log.filters):
        watchdog_log.addFilter(_InotifyStopRace())


class DirectoryWatch:
    """Calls ``changed()`` after each burst of events on the paths of ``directory`` that ``counts``."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        counts: Callable[[str], bool],
        changed: Callable[[], None],
        debounce_s: float,
    ) -> None:
        self.directory = Path(directory).resolve()
        self._changed = changed
        self._debounce_s = debounce_s
        self._lock = threading.Lock()
        self._calling = threading.Lock()  # one call at a time
        self._timer: threading.Timer | None = None
        _quiet_the_stop_race()
        self._observer = Observer()
        self._observer.name = "jetkafka-config-watch"
        self._observer.schedule(_Events(counts, self._schedule), str(self.directory), recursive=False)
        for emitter in self._observer.emitters:  # watchdog's reader of the directory's events
            emitter.name = "jetkafka-config-events"

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(timeout=5)
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def _schedule(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self._debounce_s, self._call)
            self._timer.name = "jetkafka-hot-deploy"  # it reads the files and applies the change
            self._timer.daemon = True
            self._timer.start()

    def _call(self) -> None:
        with self._calling:
            try:
                self._changed()
            except Exception:
                log.exception("applying the changes in %s failed", self.directory)


__all__ = ["DirectoryWatch"]

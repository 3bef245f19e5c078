"""FolderWatch: tells when a folder's YAML files change, once the writing is done.

watchdog reports every event of the folder (not of its subfolders): a file written, created,
deleted or renamed into or out of it, which covers editors that write a temporary file and
rename it over the original, and ``kubectl``'s ConfigMap updates (a symlink swapped). Only
names that can be channel files or ``process.yaml`` count. Calls come on a timer thread
(``jetkafka-hot-deploy``) :data:`DEBOUNCE_S` after the last event of a burst, one at a time.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

log = logging.getLogger("jetkafka.subscriptions")

DEBOUNCE_S = 0.3  # editors write in several steps; read once they are done


def _counts(path: str) -> bool:
    name = Path(path).name
    return (name.endswith((".yaml", ".yml")) and not name.startswith(".")) or name.startswith("..data")


class _Events(FileSystemEventHandler):
    def __init__(self, changed: Callable[[], None]) -> None:
        self._changed = changed

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return  # reads, ours included
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if p and _counts(os.fsdecode(p)):
                self._changed()
                return


class FolderWatch:
    """Calls ``changed()`` after each burst of changes to the YAML files of ``folder``."""

    def __init__(self, folder: str | os.PathLike[str], changed: Callable[[], None]) -> None:
        self.folder = Path(folder).resolve()
        self._changed = changed
        self._lock = threading.Lock()
        self._running = threading.Lock()  # one call at a time
        self._timer: threading.Timer | None = None
        self._observer = Observer()
        self._observer.name = "jetkafka-config-watch"
        self._observer.schedule(_Events(self._schedule), str(self.folder), recursive=False)
        for emitter in self._observer.emitters:
            emitter.name = "jetkafka-config-events"

    def start(self) -> None:
        self._observer.start()
        log.info("watching %s for channel files added, changed or removed", self.folder)

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
            self._timer = threading.Timer(DEBOUNCE_S, self._call)
            self._timer.name = "jetkafka-hot-deploy"
            self._timer.daemon = True
            self._timer.start()

    def _call(self) -> None:
        with self._running:
            try:
                self._changed()
            except Exception:
                log.exception("applying the changes of %s failed", self.folder)


__all__ = ["DEBOUNCE_S", "FolderWatch"]

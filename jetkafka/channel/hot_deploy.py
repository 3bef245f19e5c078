"""Hot deploy: apply an edited YAML file to a running channel.

A change is one of:

- **none**: the file was saved without a change that matters;
- **in place**: only settings a running channel can adopt without letting go of anything:
  ``channel.`` batch sizes, ``idle_ms``, rebalance timing, error back-off, ``on_error``,
  ``on_out_of_range``, ``shutdown_timeout_s``, and ``logging.level``. Partitions stay owned,
  nothing is re-read;
- **resubscribe**: anything else (``topics``, ``coordinator``, ``threads``, ``group``, buffer
  sizes, the ``processor``, ``kafka``, ``metrics``, ``spark``, ``zookeeper`` …): the channel
  releases its partitions gracefully (``on_stream_termination``, commits, owner nodes deleted),
  then starts again with the new file under the same consumer id. A changed ``zookeeper``
  section opens a new session.

An invalid file (syntax, unknown key, wrong type …), a topic that does not exist, or a
processor that cannot be built leaves the channel running on the configuration it has, with
one error in the log naming the file, the key and the fix.

:class:`ConfigWatcher` watches the file's directory with watchdog, so editors that write a
temporary file and rename it over the original are seen like an in-place write.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from jetkafka.config import JetkafkaConfig, load_config
from jetkafka.errors import ConfigError

log = logging.getLogger("jetkafka.hot_deploy")

IN_PLACE_CHANNEL_KEYS = frozenset(
    {
        "batch_max_events",
        "batch_max_bytes",
        "idle_ms",
        "rebalance_interval_s",
        "rebalance_delay_ms",
        "error_backoff_ms",
        "error_backoff_max_ms",
        "shutdown_timeout_s",
        "on_error",
        "on_out_of_range",
    }
)
IN_PLACE_SECTIONS = frozenset({"logging", "source"})


@dataclass(frozen=True)
class Change:
    kind: str  # "none" | "in-place" | "resubscribe"
    keys: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.kind} ({', '.join(self.keys)})" if self.keys else self.kind


def plan_change(old: JetkafkaConfig, new: JetkafkaConfig) -> Change:
    """How to get a channel running on ``old`` onto ``new``."""
    changed: list[str] = []
    resubscribe = False
    for f in dataclasses.fields(JetkafkaConfig):
        a, b = getattr(old, f.name), getattr(new, f.name)
        if a == b or f.name == "source":
            continue
        if f.name == "channel":
            for cf in dataclasses.fields(type(a)):
                if getattr(a, cf.name) != getattr(b, cf.name):
                    changed.append(f"channel.{cf.name}")
                    resubscribe |= cf.name not in IN_PLACE_CHANNEL_KEYS
        else:
            changed.append(f.name)
            resubscribe |= f.name not in IN_PLACE_SECTIONS
    if not changed:
        return Change("none", ())
    return Change("resubscribe" if resubscribe else "in-place", tuple(changed))


class _FileEvents(FileSystemEventHandler):
    def __init__(self, path: Path, changed: Callable[[], None]) -> None:
        self._path = path
        self._changed = changed

    def on_any_event(self, event: FileSystemEvent) -> None:
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if p and Path(os.fsdecode(p)).resolve() == self._path:
                self._changed()
                return


class ConfigWatcher:
    """Calls ``apply(config)`` with each valid new version of a YAML file."""

    DEBOUNCE_S = 0.3  # editors write in several steps; read once they are done

    def __init__(self, path: str | os.PathLike[str], apply: Callable[[JetkafkaConfig], None]) -> None:
        self.path = Path(path).resolve()
        self._apply = apply
        self._digest = self._read_digest()
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._observer = Observer()
        self._observer.schedule(_FileEvents(self.path, self._schedule), str(self.path.parent), recursive=False)

    def start(self) -> None:
        self._observer.start()
        log.info("watching %s for changes", self.path)

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(timeout=5)
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def _read_digest(self) -> str | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    def _schedule(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.DEBOUNCE_S, self._reload)
            self._timer.daemon = True
            self._timer.start()

    def _reload(self) -> None:
        digest = self._read_digest()
        if digest is None or digest == self._digest:
            return  # deleted mid-rename, or saved unchanged
        self._digest = digest
        try:
            config = load_config(self.path)
        except ConfigError as exc:
            log.error("%s changed but is invalid; still running on the previous configuration: %s", self.path, exc)
            return
        try:
            self._apply(config)
        except Exception:
            log.exception("applying the changed %s failed", self.path)

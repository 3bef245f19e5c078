"""ChannelFolder: every channel file of a folder run in one process, kept in step with the folder.

``jetkafka run DIR`` runs one :class:`~jetkafka.channel._inbound.InboundChannel` per channel
file of ``DIR`` (:mod:`._folder`), all sharing the process's ZooKeeper session and local
lease (:class:`~jetkafka.coordination._process_session.ProcessSession`), its metrics
endpoint, tracer and log output (:mod:`._process_settings`). Each channel keeps what is its
own: its threads, its buffer budget, its failure policy, its group.

The folder is watched (:mod:`._folder_watch`) and read again after each change, and every
10 s in case an event was missed: a file added starts its channel; a file removed stops its
channel gracefully (batches finished, offsets committed, partitions handed over at once); a
file edited is hot-deployed to its channel only; an edit of ``process.yaml`` is applied to
every channel. Each file's channel is moved by its own :class:`~._subscription.Subscription`,
so a slow shutdown or a start waiting for its broker holds back no other file. A file that is
invalid, or disagrees with the process's settings, or repeats another file's group, is
refused with the errors ``jetkafka validate DIR`` prints; a running channel whose file turns
invalid goes on with its last good configuration, as with ``jetkafka run FILE``.

Failure modes: an invalid ``process.yaml`` at start raises
:class:`~jetkafka.errors.ConfigError` (nothing can run without the process's settings); later,
an invalid ``process.yaml`` is logged and every change of the folder waits until it is fixed.
A channel that does not start is retried every 30 s and at its file's next change; the others
run on.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jetkafka.channel._inbound import InboundChannel
from jetkafka.config import JetkafkaConfig
from jetkafka.errors import ConfigError, JetkafkaError
from jetkafka.subscriptions._folder import FileReading, FolderReading, read_folder
from jetkafka.subscriptions._folder_watch import FolderWatch
from jetkafka.subscriptions._process_settings import PROCESS_FILE, PROCESS_SECTIONS
from jetkafka.subscriptions._subscription import FAILED, RUNNING, Subscription, SubscriptionStatus

log = logging.getLogger("jetkafka.subscriptions")

RESCAN_S = 10.0
# Channels starting at once: enough to start forty in a few rounds, few enough that their
# first metadata and ZooKeeper reads do not all queue behind one another.
CONCURRENT_STARTS = 8


class ChannelFolder:
    """The channels of the files in ``folder``; ``build`` makes a channel for a configuration
    (default: :func:`jetkafka._assembly.build_channel`, a channel with the standard add-ons
    and the processor its file names, as ``jetkafka run`` makes it).

    In an application: ``start()``, then ``shutdown()``; :meth:`statuses` and :meth:`channels`
    say how each file's channel is doing.
    """

    def __init__(
        self, folder: str | os.PathLike[str], build: Callable[[JetkafkaConfig], InboundChannel] | None = None
    ) -> None:
        self.folder = os.fspath(folder)
        if not os.path.isdir(self.folder):
            raise ConfigError(self.folder, "", "not a folder", "give a folder of channel files, or one YAML file")
        if build is None:
            from jetkafka._assembly import build_channel

            build = build_channel
        self._build = build
        self._lock = threading.RLock()  # one reconciliation at a time
        self._subscriptions: dict[str, Subscription] = {}
        self._established: dict[str, tuple[Any, str]] = {}
        self._starts = threading.Semaphore(CONCURRENT_STARTS)
        self._reported: dict[str, str] = {}  # file -> digest whose refusal was logged
        self._process_digest: str | None = None
        self._metrics_hold: Any = None
        self._bound_port: int | None = None
        self._watch: FolderWatch | None = None
        self._stop = threading.Event()
        self._again = threading.Event()  # read the folder at the next tick
        self._ticker: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------------

    def first_reading(self) -> FolderReading:
        """Read the folder once, before anything starts: the process's settings come from it.

        Raises :class:`~jetkafka.errors.ConfigError` when ``process.yaml`` is invalid.
        """
        reading = read_folder(self.folder)
        if reading.process_errors:
            raise _first(reading.process_errors)
        self._established = {name: (reading.shared[name], reading.shared_from[name]) for name in reading.shared}
        return reading

    def start(
        self, reading: FolderReading | None = None, watch: bool = True, interrupted: threading.Event | None = None
    ) -> None:
        """Start every valid file's channel (in parallel; returns once each has started or
        failed, or at once when ``interrupted`` is set), then watch the folder when ``watch``."""
        reading = reading or self.first_reading()
        self._process_digest = reading.process_digest
        self._hold_metrics(reading)
        self._apply(reading)
        while not self.wait_settled(0.2):
            if interrupted is not None and interrupted.is_set():
                return  # shutdown() stops what is still starting, once it has started
        if watch:
            self._watch = FolderWatch(self.folder, self.reconcile)
            self._watch.start()
        self._ticker = threading.Thread(target=self._tick, name="jetkafka-folder-tick", daemon=True)
        self._ticker.start()

    def shutdown(self, timeout: float | None = None) -> bool:
        """Stop watching and stop every channel gracefully, all at once; True when each let go
        of its partitions in time."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        with self._lock:
            subs = list(self._subscriptions.values())
        # Every one, a start in progress included: it stops once it has started.
        for sub in subs:
            sub.want(None, "the process stops")
        deadline = None if timeout is None else time.monotonic() + timeout
        settled = True
        for sub in subs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            settled = sub.wait_settled(left) and settled
        if self._metrics_hold is not None:
            self._metrics_hold.release()
            self._metrics_hold = None
        return settled and all(sub.stopped_clean is not False for sub in subs)

    def wait_settled(self, timeout: float | None = None) -> bool:
        """Wait until every subscription has done what its file asked."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            subs = list(self._subscriptions.values())
        for sub in subs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not sub.wait_settled(left):
                return False
        return True

    # -- reconciliation --------------------------------------------------------------------

    def reconcile(self) -> None:
        """Read the folder and move every subscription towards its file (see the module docstring)."""
        with self._lock:
            if self._stop.is_set():
                return
            groups = {}
            for path, sub in self._subscriptions.items():
                channel = sub.channel
                if channel is not None:
                    groups[channel.config.channel.group] = path
            process_path = str(Path(self.folder) / PROCESS_FILE)
            # What process.yaml gave is read from it again (a section it no longer holds is
            # then taken from the files, as at a start without it).
            kept = {n: v for n, v in self._established.items() if v[1] != process_path}
            try:
                reading = read_folder(self.folder, kept, groups)
            except ConfigError as exc:
                log.error("%s", exc)
                return
            if reading.process_errors:
                if reading.process_digest != self._process_digest:
                    self._process_digest = reading.process_digest
                    for error in reading.process_errors:
                        log.error("%s; no change of the folder is applied until it is fixed", error)
                return
            if reading.process_digest != self._process_digest or set(reading.shared) != set(self._established):
                self._process_digest = reading.process_digest
                self._process_changed(reading)
            self._apply(reading)

    def _process_changed(self, reading: FolderReading) -> None:
        changed = [n for n in PROCESS_SECTIONS if self._established.get(n, (None,))[0] != reading.shared.get(n)]
        if changed and self._established:
            log.info("%s changed (%s): applying it to every channel", PROCESS_FILE, ", ".join(changed))
        if "metrics" in changed:
            old = self._metrics_hold
            try:
                self._hold_metrics(reading)
            except ConfigError as exc:
                log.error("%s; the channels stay on the metrics endpoint they have", exc)
                self._metrics_hold = old
                return
            if old is not None:
                old.release()  # the endpoint closes once the last channel moved off it
        self._established = {name: (reading.shared[name], reading.shared_from[name]) for name in reading.shared}

    def _apply(self, reading: FolderReading) -> None:
        seen = set()
        for file in reading.files:
            seen.add(file.path)
            sub = self._subscriptions.get(file.path)
            if file.ok:
                assert file.config is not None
                self._reported.pop(file.path, None)
                if sub is None:
                    sub = self._subscriptions[file.path] = self._subscription(file.path)
                sub.want(self._resolved(file.config))
            else:
                self._refuse(file, sub)
        for path, sub in list(self._subscriptions.items()):
            if path in seen:
                continue
            self._reported.pop(path, None)
            if sub.settled_stopped:
                del self._subscriptions[path]
            else:
                sub.want(None)

    def _subscription(self, path: str) -> Subscription:
        return Subscription(path, self._build, self._starts, stopped=self._read_again_soon)

    def _read_again_soon(self) -> None:
        # A channel stopped: a file waiting for its group (a rename) may start now.
        self._again.set()

    def _refuse(self, file: FileReading, sub: Subscription | None) -> None:
        if self._reported.get(file.path) != file.digest:
            self._reported[file.path] = file.digest
            running = sub is not None and sub.channel is not None
            tail = "; its channel runs on its previous configuration" if running else "; its channel is not started"
            for error in file.errors:
                log.error("%s%s", error, tail)
        if sub is None:
            sub = self._subscriptions[file.path] = self._subscription(file.path)
        first = str(_first(file.errors)).splitlines()[0] if file.errors else "invalid"
        sub.refuse(first.removeprefix(f"{file.path}: "))

    def _resolved(self, config: JetkafkaConfig) -> JetkafkaConfig:
        # Port 0 means "any free port" once for the process, not once per channel.
        if config.metrics.port == 0 and self._bound_port is not None:
            return dataclasses.replace(config, metrics=dataclasses.replace(config.metrics, port=self._bound_port))
        return config

    def _hold_metrics(self, reading: FolderReading) -> None:
        """Hold the endpoint of the shared ``metrics`` (raises ConfigError when its port is taken)."""
        metrics = reading.shared.get("metrics")
        if metrics is None or metrics.port is None:
            self._metrics_hold, self._bound_port = None, None
            return
        from jetkafka.ops._metrics_endpoint import hold_endpoint

        hold = hold_endpoint(metrics, reading.shared_from["metrics"], self.statuses_as_dicts)
        self._metrics_hold, self._bound_port = hold, hold.port

    def _tick(self) -> None:
        last_scan = time.monotonic()
        while not self._stop.wait(1.0):
            now = time.monotonic()
            with self._lock:
                subs = list(self._subscriptions.values())
            for sub in subs:
                if sub.state == FAILED and sub.retry_at is not None and now >= sub.retry_at:
                    sub.retry()
            if now - last_scan >= RESCAN_S or self._again.is_set():
                self._again.clear()
                last_scan = now
                try:
                    self.reconcile()
                except Exception:
                    log.exception("reading %s failed", self.folder)

    # -- status ----------------------------------------------------------------------------

    def channels(self) -> list[InboundChannel]:
        """The channels running now, by file name."""
        with self._lock:
            subs = sorted(self._subscriptions.values(), key=lambda s: s.path)
        running = []
        for sub in subs:
            channel = sub.channel  # read once: its thread may let it go meanwhile
            if channel is not None and sub.state == RUNNING:
                running.append(channel)
        return running

    def statuses(self) -> list[SubscriptionStatus]:
        with self._lock:
            subs = sorted(self._subscriptions.values(), key=lambda s: s.path)
        return [s.status() for s in subs]

    def statuses_as_dicts(self) -> Sequence[Mapping[str, Any]]:
        return [s.to_dict() for s in self.statuses()]

    @property
    def metrics_port(self) -> int | None:
        return self._bound_port


def _first(errors: Sequence[JetkafkaError]) -> JetkafkaError:
    return errors[0]


def files_of(folder: str | os.PathLike[str]) -> list[str]:
    """The names of ``folder``'s channel files (for messages)."""
    from jetkafka.subscriptions._folder import channel_files

    return [Path(p).name for p in channel_files(folder)]


__all__ = ["ChannelFolder", "files_of"]

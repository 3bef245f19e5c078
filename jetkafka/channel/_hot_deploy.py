"""Hot deploy: apply an edited YAML file to a running channel.

A change is one of:

- **none**: the file was saved without a change that matters;
- **in place**: only settings a running channel can adopt without letting go of anything:
  ``channel.`` batch sizes, ``idle_ms``, rebalance timing, error back-off, ``on_error``,
  ``on_out_of_range``, ``commit_interval_ms``, ``shutdown_timeout_s``, and ``logging.level``.
  Partitions stay owned, nothing is re-read;
- **resubscribe**: anything else (``topics``, ``coordinator``, ``threads``, ``group``, buffer
  sizes, the ``processor``, ``kafka``, ``metrics``, ``spark``, ``zookeeper`` …): the channel
  releases its partitions gracefully (``on_stream_termination``, commits, owner nodes deleted),
  then starts again with the new file under the same consumer id. A changed ``zookeeper``
  section opens a new session. A partition whose call (a batch, ``on_stream_termination``)
  outlasts ``shutdown_timeout_s`` is not given up under that call: it stays owned, with the old
  session, until the call returns, then is released and taken again from its commit
  (:mod:`jetkafka.channel._ended_start`); meanwhile nobody else works on it.

An invalid file (syntax, unknown key, wrong type …), a topic that does not exist, or a
processor that cannot be built leaves the channel running on the configuration it has, with
one error in the log naming the file, the key and the fix.

:class:`ConfigWatcher` watches the file's directory with watchdog, so editors that write a
temporary file and rename it over the original are seen like an in-place write.

:class:`HotDeploy` belongs to an :class:`InboundChannel`, which hands it ``watch`` and
``reconfigure``. It owns the watcher and the ``reconfiguring`` lock: a reconfiguration (on the
watcher's timer thread or the caller's) and a shutdown hold it, so they never interleave. Only
under it does it replace the channel's ``config`` and ``processor``.
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
from typing import TYPE_CHECKING

from jetkafka._directory_watch import DirectoryWatch
from jetkafka.config import JetkafkaConfig, load_config
from jetkafka.errors import ConfigError, JetkafkaError
from jetkafka.processors._base import BatchEventProcessor
from jetkafka.processors._loading import load_processor

if TYPE_CHECKING:
    from jetkafka.channel._internals import ChannelInternals

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
        "commit_interval_ms",
    }
)
IN_PLACE_SECTIONS = frozenset({"logging", "source"})
# Keys of a section otherwise applied by a resubscribe that a running channel adopts as they are
# (the metrics endpoint reads metrics.debug at each request).
IN_PLACE_SECTION_KEYS = frozenset({"metrics.debug"})


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
        elif dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b) and f.name not in IN_PLACE_SECTIONS:
            keys = [f"{f.name}.{sf.name}" for sf in dataclasses.fields(a) if getattr(a, sf.name) != getattr(b, sf.name)]
            in_place = bool(keys) and all(k in IN_PLACE_SECTION_KEYS for k in keys)
            changed += keys if in_place else [f.name]
            resubscribe |= not in_place
        else:
            changed.append(f.name)
            resubscribe |= f.name not in IN_PLACE_SECTIONS
    if not changed:
        return Change("none", ())
    return Change("resubscribe" if resubscribe else "in-place", tuple(changed))


class ConfigWatcher:
    """Calls ``apply(config)`` with each valid new version of a YAML file."""

    DEBOUNCE_S = 0.3  # editors write in several steps; read once they are done

    def __init__(
        self,
        path: str | os.PathLike[str],
        apply: Callable[[JetkafkaConfig], None],
        load: Callable[[str | os.PathLike[str]], JetkafkaConfig] = load_config,
    ) -> None:
        self.path = Path(path).resolve()
        self._apply = apply
        self._load = load
        self._digest = self._read_digest()
        self._watch = DirectoryWatch(
            self.path.parent, lambda p: Path(p).resolve() == self.path, self._reload, self.DEBOUNCE_S
        )

    def start(self) -> None:
        self._watch.start()
        log.info("watching %s for changes", self.path)
        # The channel read the file before this watch began: an edit saved in between would
        # wait for the next one. The file is read once more now that every later write is seen
        # (unchanged, it applies nothing).
        self._digest = None
        self._reload()

    def stop(self) -> None:
        self._watch.stop()

    def _read_digest(self) -> str | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    def _reload(self) -> None:
        digest = self._read_digest()
        if digest is None or digest == self._digest:
            return  # deleted mid-rename, or saved unchanged
        self._digest = digest
        try:
            config = self._load(self.path)
        except ConfigError as exc:
            log.error("%s changed but is invalid; still running on the previous configuration: %s", self.path, exc)
            return
        try:
            self._apply(config)
        except Exception:
            log.exception("applying the changed %s failed", self.path)


class HotDeploy:
    """Watch ``channel``'s YAML file and move the channel onto each valid change."""

    def __init__(self, channel: ChannelInternals) -> None:
        self._channel = channel
        self._watcher: ConfigWatcher | None = None
        self.reconfiguring = threading.Lock()

    def watch(
        self,
        path: str | os.PathLike[str] | None = None,
        load: Callable[[str | os.PathLike[str]], JetkafkaConfig] | None = None,
    ) -> None:
        """See :meth:`InboundChannel.watch`."""
        path = path or self._channel.config.source
        if not os.path.isfile(path):
            raise ConfigError(str(path), "", "cannot watch: not a file", "pass the YAML file the channel runs on")
        if self._watcher is None:
            self._watcher = ConfigWatcher(path, self._apply, load or load_config)
            self._watcher.start()

    def _apply(self, new: JetkafkaConfig) -> None:
        self.reconfigure(new)  # the outcome is logged there; the watcher needs none

    def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None

    def reconfigure(self, new: JetkafkaConfig) -> Change:
        """See :meth:`InboundChannel.reconfigure`."""
        channel = self._channel
        with self.reconfiguring:
            change = plan_change(channel.config, new)
            if change.kind == "none" or not channel.running:
                return change
            log.info("%s changed: %s", new.source, change)
            if change.kind == "in-place":
                self._apply_in_place(new)
                return change
            try:
                processor = self._processor_for(new)
                if new.kafka == channel.config.kafka and channel._fetcher is not None:
                    channel._fetcher.partition_counts(new.channel.topics)  # raises TopicNotFound
            except JetkafkaError as exc:
                log.error("%s: not applied, still running on the previous configuration: %s", new.source, exc)
                return Change("rejected", change.keys)
            old_config, old_processor = channel.config, channel.processor
            # A partition whose call outlasts shutdown_timeout_s is kept until that call returns,
            # not given up under it: see jetkafka.channel._ended_start.
            channel._leave(None, hold_over=True)
            channel.config, channel.processor = new, processor
            try:
                channel.start()
            except Exception as exc:
                # Whatever failed (a processor's on_start included), the old configuration ran.
                log.error(
                    "%s: start failed (%s: %s); going back to the previous configuration",
                    new.source,
                    type(exc).__name__,
                    exc,
                    exc_info=not isinstance(exc, JetkafkaError),
                )
                channel.config, channel.processor = old_config, old_processor
                channel.start()
                return Change("rejected", change.keys)
            return change

    def _processor_for(self, new: JetkafkaConfig) -> BatchEventProcessor:
        channel = self._channel
        if new.processor is None or new.processor == channel.config.processor:
            return channel.processor
        return load_processor(new.processor, channel._pythonpath)

    def _apply_in_place(self, new: JetkafkaConfig) -> None:
        channel = self._channel
        old_policy = channel.config.channel.on_error
        channel.config = new
        cfg = new.channel
        logging.getLogger("jetkafka").setLevel(new.logging.level)
        if (runner := channel._runner) is not None:
            failures = runner.failures
            old_sink = None
            if cfg.on_error != old_policy:
                # A producer per change would open connections to the brokers each time. In
                # place before the runner wakes the partitions waiting out a back-off (its
                # config setter): their next attempt goes to the new topic, never the old one.
                old_sink, failures.dead_letter = failures.dead_letter, channel._dead_letter_sink()
            runner.config = cfg  # and failures.config, waking the back-offs of an on_error change
            if old_sink is not None:
                old_sink.close()
        if channel._queue is not None:
            channel._queue.set_idle_ms(cfg.idle_ms)
        if channel._committer is not None:
            channel._committer.set_interval(cfg.commit_interval_ms / 1000)
        if channel._mirror is not None:
            channel._mirror.set_interval(cfg.commit_interval_ms / 1000)
        if channel._membership is not None:
            channel._membership.config = cfg

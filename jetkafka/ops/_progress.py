"""The periodic progress line of ``jetkafka run``: events per second, lag and partitions held.

Every ``logging.progress_interval_s`` seconds a thread, ``jetkafka-progress``, logs one line at
INFO, e.g.::

    progress: 12,000 events in 60 s (200.0/s), 40,000 in all; 6 partitions held; lag 1,250 events

The lag is the sum over the held partitions of high watermark minus position (the next offset
to process), read from Kafka with a short timeout; it reads "lag unknown" when Kafka does not
answer. The line is for people reading the log; monitoring should use the metrics endpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from jetkafka.channel._running import RunningChannel
from jetkafka.errors import JetkafkaError

log = logging.getLogger("jetkafka.progress")

_WATERMARK_TIMEOUT_S = 2.0


class _PeriodicLine:
    """The ``jetkafka-progress`` thread: :meth:`_run` until :meth:`stop`."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jetkafka-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=_WATERMARK_TIMEOUT_S + 1)

    def _run(self) -> None:
        raise NotImplementedError


class ProgressLog(_PeriodicLine):
    """Logs :func:`progress_line` every ``interval_s`` seconds until :meth:`stop`.

    Its thread only reads the channel (stats, partition snapshots, watermarks through the
    metadata consumer); it never touches a partition's processing.
    """

    def __init__(self, channel: RunningChannel, interval_s: float) -> None:
        super().__init__(interval_s)
        self._channel = channel

    def _run(self) -> None:
        events_before = int(self._channel.stats.summary()["events"])
        since = time.monotonic()
        while not self._stop.wait(self._interval_s):
            now = time.monotonic()
            events = int(self._channel.stats.summary()["events"])
            try:
                log.info("%s", progress_line(self._channel, events - events_before, now - since, events))
            except Exception:
                # A progress line is never worth stopping for; the next one may work.
                log.warning("progress line failed", exc_info=True)
            events_before, since = events, now


class FolderProgressLog(_PeriodicLine):
    """The progress line of ``jetkafka run DIR``: one line for all the process's channels.

    ``channels()`` gives the running channels; ``states()`` the count of subscriptions per
    state (running, failed, invalid ...). Per channel lag would take a broker look-up per held
    partition of every channel each time: ``jetkafka status DIR`` and the metrics show it.
    """

    def __init__(
        self, channels: Callable[[], Sequence[RunningChannel]], states: Callable[[], Mapping[str, int]], interval_s: float
    ) -> None:
        super().__init__(interval_s)
        self._channels = channels
        self._states = states

    def _totals(self) -> dict[str, int]:
        return {c.config.channel.group: int(c.stats.summary()["events"]) for c in self._channels()}

    def _run(self) -> None:
        before, since = self._totals(), time.monotonic()
        while not self._stop.wait(self._interval_s):
            now, totals = time.monotonic(), self._totals()
            try:
                log.info("%s", folder_progress_line(before, totals, now - since, self._states()))
            except Exception:
                log.warning("progress line failed", exc_info=True)
            before, since = totals, now


def folder_progress_line(before: Mapping[str, int], now: Mapping[str, int], seconds: float, states: Mapping[str, int]) -> str:
    """``progress: 3 subscriptions running, 1 failed; 12,000 events in 60 s (200.0/s); slowest: a 0, b 12``."""
    # A channel restarted by a hot deploy counts from 0 again: its new total is its progress.
    deltas = {g: (n - before[g] if n >= before.get(g, 0) else n) for g, n in now.items()}
    events = sum(deltas.values())
    rate = events / seconds if seconds > 0 else 0.0
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items(), key=lambda kv: kv[0] != "running"))
    slowest = sorted(deltas.items(), key=lambda kv: kv[1])[:3]
    tail = ("; fewest events: " + ", ".join(f"{g} {n:,}" for g, n in slowest)) if len(deltas) > 1 else ""
    return f"progress: subscriptions {counts or 'none'}; {events:,} events in {seconds:.0f} s ({rate:,.1f}/s){tail}"


def progress_line(channel: RunningChannel, events: int, seconds: float, total: int) -> str:
    """One line: events in the last ``seconds`` and their rate, ``total``, partitions held, lag."""
    held = channel.partitions()
    lag: int | None = 0
    for p in held:
        try:
            _, high = channel.watermarks(p.topic, p.partition, timeout=_WATERMARK_TIMEOUT_S)
        except JetkafkaError:
            lag = None
            break
        lag = (lag or 0) + max(0, high - p.position)
    rate = events / seconds if seconds > 0 else 0.0
    lag_text = "lag unknown (Kafka did not answer)" if lag is None else f"lag {lag:,} events"
    return (
        f"progress: {events:,} events in {seconds:.0f} s ({rate:,.1f}/s), {total:,} in all; "
        f"{len(held)} partition{'s' if len(held) != 1 else ''} held; {lag_text}"
    )

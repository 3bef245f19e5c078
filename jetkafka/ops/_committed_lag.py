"""Lag in seconds of a partition seen from the group: the age of the record at its committed offset.

For a partition the status page does not hold (all of them in ``jetkafka ui``), the next record
to process is the one at the committed offset. Its lag in seconds is ``now - its timestamp``,
and 0 when the committed offset is at or past the high watermark: the rule of
:mod:`jetkafka.ops._lag_time` (the same :class:`~jetkafka.ops._lag_time.LagClock` computes
it), with the record read from Kafka instead of a fetch buffer.

Cost and bounds: a record is read only when the partition is behind (lag in records > 0), and
once per ``(partition, committed offset)``: a record never changes, so its timestamp is cached
until the committed offset moves. At most ``max_reads`` records are read per refresh, each
waiting at most ``timeout_s``; partitions left out are read first in the next refresh.

Failure modes: a partition whose record cannot be read (nothing within the timeout, an offset
out of range, Kafka unreachable) has no value (``None``) and its reason in :meth:`fill`'s answer;
it is tried again in the next refresh.

Threads: one refresh at a time (the status view builds under its own lock); not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from jetkafka.events import Key
from jetkafka.ops._lag_time import LagClock

MAX_READS = 8
READ_TIMEOUT_S = 1.0

# (topic, partition, offset, timeout) -> the record's timestamp in epoch ms (None: it has none);
# raises an exception naming why when the record cannot be read.
ReadTimestamp = Callable[[str, int, int, float], "int | None"]


class CommittedRecordLag:
    """Fills ``lag_seconds`` of status page partitions from the record at the committed offset."""

    def __init__(self, max_reads: int = MAX_READS, timeout_s: float = READ_TIMEOUT_S) -> None:
        self._max_reads = max_reads
        self._timeout = timeout_s
        self._timestamps: dict[Key, tuple[int, int | None]] = {}  # key -> (committed, timestamp ms)
        self._tried: dict[Key, float] = {}  # when a read was last tried: the oldest go first
        self._clock = LagClock()

    def fill(
        self, partitions: Iterable[dict[str, Any]], read: ReadTimestamp, checked_at: float, now: float
    ) -> dict[str, str]:
        """Set ``lag_seconds`` of each partition (a ``/status.json`` entry) whose value is None.

        ``checked_at`` is when the watermarks were read (epoch seconds). Returns, per
        ``"topic[partition]"`` left without a value, why.
        """
        todo = [p for p in partitions if p.get("lag_seconds") is None]
        why: dict[str, str] = {}
        behind: list[tuple[Key, dict[str, Any]]] = []
        for part in todo:
            key: Key = (part["topic"], part["partition"])
            committed, high = part["committed"], part["high"]
            if committed is None:
                why[f"{key[0]}[{key[1]}]"] = "nothing committed yet"
            elif committed >= high:
                part["lag_seconds"] = self._lag(key, committed, high, None, checked_at, now)
            else:
                behind.append((key, part))
        self._forget(behind)
        unread = [(k, p) for k, p in behind if k not in self._timestamps]
        unread.sort(key=lambda kp: self._tried.get(kp[0], 0.0))
        for index, (key, part) in enumerate(unread):
            name = f"{key[0]}[{key[1]}]"
            if index >= self._max_reads:
                why[name] = f"not read yet (at most {self._max_reads} records are read per refresh)"
                continue
            self._tried[key] = now
            try:
                self._timestamps[key] = (part["committed"], read(key[0], key[1], part["committed"], self._timeout))
            except Exception as exc:  # noqa: BLE001 - any failure leaves this partition unknown, with its reason
                why[name] = f"record at the committed offset unreadable: {exc}"
        for key, part in behind:
            if key not in self._timestamps:
                continue
            committed, ms = self._timestamps[key]
            if ms is None:
                why[f"{key[0]}[{key[1]}]"] = f"the record at offset {committed} has no timestamp"
                continue
            part["lag_seconds"] = self._lag(key, committed, part["high"], ms, checked_at, now)
        return why

    def _lag(self, key: Key, committed: int, high: int, ms: int | None, checked_at: float, now: float) -> float | None:
        # The metric's rule: a buffer holding the record read (or an empty one when caught up).
        return self._clock.lag_seconds(
            key,
            position=committed,
            buffered=0 if ms is None else 1,
            next_timestamp_ms=ms,
            high_watermark=high,
            checked_at=checked_at,
            now=now,
        )

    def _forget(self, behind: list[tuple[Key, dict[str, Any]]]) -> None:
        """Drop cached timestamps of partitions no longer behind or whose committed offset moved."""
        current = {key: part["committed"] for key, part in behind}
        for key in [k for k, (committed, _) in self._timestamps.items() if current.get(k) != committed]:
            del self._timestamps[key]
        for key in [k for k in self._tried if k not in current]:
            del self._tried[key]
        self._clock.keep_only(current)


__all__ = ["MAX_READS", "READ_TIMEOUT_S", "CommittedRecordLag", "ReadTimestamp"]

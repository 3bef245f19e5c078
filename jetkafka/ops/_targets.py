"""Where a reset moves each partition: earliest, latest, an offset, or the first record at a time.

A time is looked up with the brokers' ListOffsets by timestamp. A time before the oldest record
still held (records deleted by retention) gives the low watermark; a time after the last record
gives the high watermark; a time in the future is an error. An explicit offset must lie within
every affected partition's log (low..high); otherwise nothing is changed.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable
from dataclasses import dataclass

from jetkafka.ops._protocol import ResetError
from jetkafka.ops._status import BrokerView


@dataclass(frozen=True)
class Target:
    kind: str  # earliest, latest, offset, time
    value: int = 0  # the offset, or the time in ms since the epoch

    @property
    def spec(self) -> str:
        return self.kind if self.kind in ("earliest", "latest") else f"{self.kind}:{self.value}"

    @classmethod
    def from_spec(cls, spec: str) -> Target:
        kind, _, value = spec.partition(":")
        return cls(kind, int(value or 0))

    def describe(self) -> str:
        if self.kind == "time":
            return dt.datetime.fromtimestamp(self.value / 1000, dt.UTC).isoformat(timespec="milliseconds")
        return self.kind if self.kind in ("earliest", "latest") else f"offset {self.value}"


def parse_target(to: str | int | dt.datetime) -> Target:
    """``earliest``, ``latest``, an offset, or an ISO-8601 time (without a zone: UTC)."""
    if isinstance(to, dt.datetime):
        moment = to if to.tzinfo is not None else to.replace(tzinfo=dt.UTC)
        return Target("time", int(moment.timestamp() * 1000))
    if isinstance(to, int) and not isinstance(to, bool):
        if to < 0:
            raise ResetError(f"offset {to} is negative; give an offset >= 0, earliest, latest or a time")
        return Target("offset", to)
    text = str(to).strip()
    if text.lower() in ("earliest", "latest"):
        return Target(text.lower())
    if text.isdigit():
        return Target("offset", int(text))
    try:
        return parse_target(dt.datetime.fromisoformat(text))
    except ValueError:
        raise ResetError(
            f"--to {text!r} is not earliest, latest, an offset or an ISO-8601 time; "
            "write e.g. --to 2024-05-01T12:00:00Z, --to earliest or --to 1500"
        ) from None


def compute_targets(broker: BrokerView, topic: str, partitions: Iterable[int], target: Target) -> dict[int, int]:
    """The offset each partition moves to. A time before retention gives the low watermark;
    a time after the last record gives the high watermark; a future time is an error."""
    partitions = sorted(partitions)
    marks = {p: broker.watermarks(topic, p) for p in partitions}
    if target.kind == "earliest":
        return {p: marks[p][0] for p in partitions}
    if target.kind == "latest":
        return {p: marks[p][1] for p in partitions}
    if target.kind == "offset":
        outside = {p: m for p, m in marks.items() if not m[0] <= target.value <= m[1]}
        if outside:
            ranges = ", ".join(f"{topic}[{p}] holds {low}..{high}" for p, (low, high) in sorted(outside.items()))
            raise ResetError(
                f"offset {target.value} is outside the log ({ranges}); give an offset within every "
                "partition's range, limit --partitions, or use earliest/latest"
            )
        return {p: target.value for p in partitions}
    now_ms = int(time.time() * 1000)
    if target.value > now_ms:
        raise ResetError(
            f"time {target.describe()} is in the future (now is "
            f"{Target('time', now_ms).describe()}); give a past time, or --to latest"
        )
    found = broker.offsets_for_time(topic, partitions, target.value)
    out = {}
    for p in partitions:
        low, high = marks[p]
        offset = found.get(p)
        # Records deleted by retention are gone: the first one still held is the earliest match.
        out[p] = high if offset is None else min(max(offset, low), high)
    return out

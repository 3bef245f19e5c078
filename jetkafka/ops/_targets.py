"""Where a reset moves each partition.

Absolute targets: earliest, latest, an offset, or the first record at a time. Relative ones:
``shift`` (the committed offset plus N, N may be negative), ``duration`` (the first record at
or after *now minus the duration*, like kafka-consumer-groups.sh's ``--by-duration``) and
``undo`` (each partition's offset before an earlier reset, from the history).

A time is looked up with the brokers' ListOffsets by timestamp. A time before the oldest record
still held (records deleted by retention) gives the low watermark; a time after the last record
gives the high watermark; a time in the future is an error. An explicit offset must lie within
every affected partition's log (low..high); otherwise nothing is changed. A shift or an undo
that lands outside the log is clamped to it, as Kafka's tool does, and the plan says so
(:attr:`TargetPlan.notes`).

Targets are computed once per command, when its node is created (:mod:`jetkafka.ops._reset`):
a relative target is relative to the committed offsets and the clock at that moment, and a
retry of the command keeps them.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from jetkafka.ops._protocol import ResetError
from jetkafka.ops._status import BrokerView

_DURATION = re.compile(
    r"P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> int:
    """An ISO-8601 duration (``PnWnDTnHnMnS``, e.g. ``PT1H``, ``P1DT12H``, ``PT90S``) in ms.

    Years and months are refused: their length depends on the calendar.
    """
    match = _DURATION.fullmatch(text.strip())
    if match is None or text.strip().upper() in ("P", "PT") or not any(match.groupdict().values()):
        raise ResetError(
            f"--by-duration {text!r} is not an ISO-8601 duration of weeks, days, hours, minutes and seconds; "
            "write e.g. PT1H (an hour), PT30M, P1DT12H or PT90S"
        )
    parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
    seconds = (
        parts["weeks"] * 7 * 86400 + parts["days"] * 86400 + parts["hours"] * 3600 + parts["minutes"] * 60 + parts["seconds"]
    )
    return round(seconds * 1000)


def format_duration(ms: int) -> str:
    """``ms`` as an ISO-8601 duration, e.g. 5400000 -> ``PT1H30M``."""
    seconds, rest = divmod(ms, 1000)
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = "P" + (f"{days}D" if days else "")
    clock = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or rest or not (days or clock):
        clock += f"{seconds}.{rest:03d}S" if rest else f"{seconds}S"
    return text + ("T" + clock if clock else "")


@dataclass(frozen=True)
class Target:
    kind: str  # earliest, latest, offset, time, shift, duration, undo, kafka-group
    value: int = 0  # the offset, the time or duration in ms, or the shift; kafka-group: 1 if latest is its fallback
    ref: str = ""  # undo: the id of the reset to undo; kafka-group: the Kafka group

    @classmethod
    def kafka_group(cls, group: str, fallback: str = "earliest") -> Target:
        """The offsets Kafka consumer group ``group`` committed; ``fallback`` (earliest or
        latest) for the partitions it never committed."""
        return cls("kafka-group", 1 if fallback == "latest" else 0, group)

    @property
    def fallback(self) -> str:
        return "latest" if self.value else "earliest"

    @property
    def spec(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "kafka-group":
            return f"kafka-group:{self.fallback}:{self.ref}"
        return f"undo:{self.ref}" if self.kind == "undo" else f"{self.kind}:{self.value}"

    @classmethod
    def from_spec(cls, spec: str) -> Target:
        kind, _, value = spec.partition(":")
        if kind == "undo":
            return cls(kind, ref=value)
        if kind == "kafka-group":
            fallback, _, group = value.partition(":")  # a group id may hold ':' itself
            return cls.kafka_group(group, fallback)
        return cls(kind, int(value or 0))

    @property
    def relative(self) -> bool:
        """Whether the target depends on the committed offsets or the clock when it is computed."""
        return self.kind in ("shift", "duration", "undo")

    def describe(self) -> str:
        if self.kind == "time":
            return dt.datetime.fromtimestamp(self.value / 1000, dt.UTC).isoformat(timespec="milliseconds")
        if self.kind == "shift":
            return f"shift by {self.value:+d}"
        if self.kind == "duration":
            return f"{format_duration(self.value)} back"
        if self.kind == "undo":
            return f"undo of {self.ref}"
        if self.kind == "kafka-group":
            return f"Kafka group {self.ref}'s offsets ({self.fallback} where it has none)"
        return self.kind if self.kind in ("earliest", "latest") else f"offset {self.value}"


@dataclass(frozen=True)
class TargetPlan:
    """The offset each partition moves to, and why some differ from what was asked."""

    targets: dict[int, int]
    notes: dict[int, str] = field(default_factory=dict)  # partition: e.g. "clamped to the log end 120"


def parse_target(to: str | int | dt.datetime | Target) -> Target:
    """``earliest``, ``latest``, an offset, or an ISO-8601 time (without a zone: UTC); a
    :class:`Target` (how shifts, durations and undos are given) is returned as it is."""
    if isinstance(to, Target):
        return to
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
    """The offset each partition moves to, for an absolute target (see :func:`plan_targets`)."""
    return plan_targets(broker, topic, partitions, target).targets


def plan_targets(
    broker: BrokerView,
    topic: str,
    partitions: Iterable[int],
    target: Target,
    committed: Mapping[int, int | None] | None = None,
    before: Mapping[int, int] | None = None,
) -> TargetPlan:
    """The offset each partition moves to, with a note for each one clamped to its log.

    ``committed`` (the group's offsets now) is needed by ``shift``; ``before`` (the offsets
    before the reset being undone) by ``undo``. A time before retention gives the low
    watermark; a time after the last record gives the high watermark; a future time is an
    error; so is an explicit offset outside a partition's log, and a shift of a partition the
    group never committed.
    """
    partitions = sorted(partitions)
    marks = {p: broker.watermarks(topic, p) for p in partitions}
    if target.kind == "earliest":
        return TargetPlan({p: marks[p][0] for p in partitions})
    if target.kind == "latest":
        return TargetPlan({p: marks[p][1] for p in partitions})
    if target.kind == "offset":
        outside = {p: m for p, m in marks.items() if not m[0] <= target.value <= m[1]}
        if outside:
            ranges = ", ".join(f"{topic}[{p}] holds {low}..{high}" for p, (low, high) in sorted(outside.items()))
            raise ResetError(
                f"offset {target.value} is outside the log ({ranges}); give an offset within every "
                "partition's range, limit --partitions, or use earliest/latest"
            )
        return TargetPlan({p: target.value for p in partitions})
    if target.kind == "kafka-group":
        return _from_kafka_group(broker, topic, target, marks)
    if target.kind in ("shift", "undo"):
        if target.kind == "shift":
            known = committed or {}
            never = [p for p in partitions if known.get(p) is None]
            if never:
                raise ResetError(
                    f"--shift-by moves the committed offset, and {topic} partition(s) {never} have none; "
                    "give an absolute target (--to) or limit --partitions"
                )
            wanted = {p: int(known[p] or 0) + target.value for p in partitions}
        else:
            wanted = {p: (before or {})[p] for p in partitions}
        return _clamped(wanted, marks)
    now_ms = int(time.time() * 1000)
    moment = now_ms - target.value if target.kind == "duration" else target.value
    if moment > now_ms:
        raise ResetError(
            f"time {target.describe()} is in the future (now is "
            f"{Target('time', now_ms).describe()}); give a past time, or --to latest"
        )
    found = broker.offsets_for_time(topic, partitions, moment)
    out = {}
    for p in partitions:
        low, high = marks[p]
        offset = found.get(p)
        # Records deleted by retention are gone: the first one still held is the earliest match.
        out[p] = high if offset is None else min(max(offset, low), high)
    return TargetPlan(out)


def _from_kafka_group(broker: BrokerView, topic: str, target: Target, marks: Mapping[int, tuple[int, int]]) -> TargetPlan:
    found = broker.kafka_group_offsets(target.ref, topic, list(marks))
    wanted = {p: found.get(p, marks[p][1] if target.fallback == "latest" else marks[p][0]) for p in marks}
    plan = _clamped(wanted, marks)
    for p in marks:
        if p not in found:
            plan.notes[p] = f"Kafka group {target.ref} has no offset: {target.fallback}"
    return plan


def _clamped(wanted: Mapping[int, int], marks: Mapping[int, tuple[int, int]]) -> TargetPlan:
    targets, notes = {}, {}
    for p, offset in sorted(wanted.items()):
        low, high = marks[p]
        targets[p] = min(max(offset, low), high)
        if offset < low:
            notes[p] = f"{offset} is before the log start: clamped to {low}"
        elif offset > high:
            notes[p] = f"{offset} is past the log end: clamped to {high}"
    return TargetPlan(targets, notes)

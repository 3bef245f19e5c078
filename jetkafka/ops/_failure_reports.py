"""Held partitions that do not move on, as each instance reports them to the rest of the group.

A partition does not move on when its batch keeps failing (``channel.on_error``: retried, or
isolated record by record under ``skip`` / ``dead-letter``) or it is halted by
``channel.on_out_of_range: fail``: :class:`~jetkafka.channel._partition.PartitionFailure`.
Only the instance holding it knows; ``jetkafka status``, ``jetkafka ui`` and the status page of
another instance read it from ZooKeeper, where each instance with such partitions keeps one
ephemeral node, ``/consumers/<group>/failures/<consumer-id>`` (JSON). An instance whose
partitions all move on has no node.

Cost and bounds: :class:`FailureReporter` (thread ``jetkafka-failure-reports``, started and
stopped with the channel by :class:`FailureReportsAddOn`, one of the standard add-ons) looks at
the channel's partitions in memory every :data:`POLL_S` seconds and writes only when what the
node would say changed: at the next look when a partition starts or stops failing, changes
state or fails on other offsets; when only the details change (attempts, the error's text, the
next attempt's time), at most every :data:`REFRESH_S` seconds. So a batch that succeeds never
writes, a partition retrying one batch costs at most one write per refresh whatever its
back-off, and an instance at most one write per look. The node lists at most
:data:`MAX_LISTED` partitions (those failing longest) and counts the others, so it stays small.

Guarantees: a report is a view, never an input to any decision. It is as of its
``reported_at``: its details at most :data:`REFRESH_S` seconds (plus a look) older than the
instance's own, and a change of state at most a look older. Readers (:func:`read_failures`)
attach a report to a partition only when the reporting instance is the partition's owner, so a
node not yet rewritten after a hand-over shows nothing wrong for the new owner. The node goes
with the instance's session; under a new session it is written again at the next look.

Failure modes: a write that fails (ZooKeeper out of reach) is logged once per outage at
WARNING and tried again at the next look; a node that cannot be decoded (written by another
version) is ignored by readers.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from jetkafka.channel._add_ons import ChannelAddOn
from jetkafka.events import Key
from jetkafka.ops._tables import format_table

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from jetkafka.channel._partition import PartitionFailure
    from jetkafka.channel._running import RunningChannel
    from jetkafka.coordination._paths import GroupPaths
    from jetkafka.processors._base import BatchEventProcessor

log = logging.getLogger(__name__)

POLL_S = 0.5
REFRESH_S = 10.0
MAX_LISTED = 100
WRITE_TIMEOUT_S = 5.0
STATES = ("retrying", "isolating", "halted")


@dataclass(frozen=True)
class FailureReport:
    """One partition that does not move on, as its owner last reported it (epoch seconds)."""

    state: str  # one of STATES
    since: float
    attempts: int
    error: str
    offsets: tuple[int, int] | None
    next_attempt: float | None
    reported_at: float

    @classmethod
    def of(cls, failure: PartitionFailure, reported_at: float) -> FailureReport:
        return cls(
            failure.state,
            failure.since,
            failure.attempts,
            failure.error,
            failure.offsets,
            failure.next_attempt,
            reported_at,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``failure`` of a partition in ``status --json`` and ``/status.json``)."""
        return {
            "state": self.state,
            "since": self.since,
            "attempts": self.attempts,
            "error": self.error,
            "offsets": None if self.offsets is None else list(self.offsets),
            "next_attempt": self.next_attempt,
            "reported_at": self.reported_at,
        }


def failures_path(paths: GroupPaths) -> str:
    return f"{paths.root}/failures"


def encode(consumer: str, failures: list[tuple[Key, PartitionFailure]], more: int, reported_at: float) -> bytes:
    partitions = [
        {"topic": topic, "partition": partition, **FailureReport.of(failure, reported_at).to_dict()}
        for (topic, partition), failure in failures
    ]
    for entry in partitions:
        del entry["reported_at"]  # once for the node
    node = {"consumer": consumer, "reported_at": reported_at, "partitions": partitions, "more": more}
    return json.dumps(node, separators=(",", ":")).encode()


def decode(data: bytes) -> dict[Key, FailureReport] | None:
    """The partitions of one node; None when it is not one this version understands."""
    try:
        node = json.loads(data)
        reported_at = float(node["reported_at"])
        out: dict[Key, FailureReport] = {}
        for entry in node["partitions"]:
            offsets = entry["offsets"]
            out[(str(entry["topic"]), int(entry["partition"]))] = FailureReport(
                state=str(entry["state"]),
                since=float(entry["since"]),
                attempts=int(entry["attempts"]),
                error=str(entry["error"]),
                offsets=None if offsets is None else (int(offsets[0]), int(offsets[1])),
                next_attempt=None if entry["next_attempt"] is None else float(entry["next_attempt"]),
                reported_at=reported_at,
            )
        return out
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def read_failures(client: KazooClient, paths: GroupPaths) -> dict[str, dict[Key, FailureReport]]:
    """Every instance's report, by consumer id (two reads per failing instance, one when none)."""
    root = failures_path(paths)
    try:
        names = sorted(client.get_children(root))
    except NoNodeError:
        return {}
    out = {}
    for name in names:
        try:
            data, _ = client.get(f"{root}/{name}")
        except NoNodeError:
            continue  # the instance's partitions moved on, or it left, meanwhile
        reports = decode(data)
        if reports is not None:
            out[name] = reports
    return out


def owned_failure(
    reports: dict[str, dict[Key, FailureReport]], owner: str | None, key: Key
) -> FailureReport | None:
    """The failure of ``key`` reported by its owner; None when it moves on or nobody holds it."""
    return None if owner is None else reports.get(owner, {}).get(key)


# The last error in ``jetkafka status``'s table; --json and the status page have all of it.
TABLE_ERROR_CHARS = 72


def render_failures(failing: Sequence[tuple[str, int, FailureReport]], now: float) -> list[str]:
    """The "not moving on" part of ``jetkafka status``: per partition its state, since when,
    the attempts, the next attempt, the offsets and the last error; then what to do."""
    if not failing:
        return []
    rows = []
    for topic, partition, f in failing:
        error = f.error if len(f.error) <= TABLE_ERROR_CHARS else f.error[: TABLE_ERROR_CHARS - 1] + "\u2026"
        since = dt.datetime.fromtimestamp(f.since, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        offsets = "-" if f.offsets is None else f"{f.offsets[0]}..{f.offsets[1]}"
        rows.append((topic, partition, f.state, f"{since} ({_seconds(now - f.since)} ago)", f.attempts,
                     _next_attempt(f, now), offsets, error))  # fmt: skip
    lines = ["", "not moving on (as their owners last reported it):"]
    header = ("TOPIC", "PARTITION", "STATE", "SINCE", "ATTEMPTS", "NEXT ATTEMPT", "OFFSETS", "LAST ERROR")
    lines += format_table(header, rows, right={1, 4})
    if any(f.state != "halted" for *_, f in failing):
        lines.append(
            "a batch that keeps failing: fix the processor, or set channel.on_error.mode to skip or dead-letter "
            "(applied at the next attempt), or move the partition past the record with "
            "`jetkafka offsets reset --topic T --partitions P --to OFFSET`"
        )
    if any(f.state == "halted" for *_, f in failing):
        lines.append("halted by channel.on_out_of_range: fail: move its offset with `jetkafka offsets reset` to continue")
    return lines


def _next_attempt(failure: FailureReport, now: float) -> str:
    if failure.state == "halted":
        return "after a reset"
    if failure.next_attempt is None:
        return "now"
    if failure.next_attempt <= now:
        return "due"
    return f"in {_seconds(failure.next_attempt - now)}"


def _seconds(seconds: float) -> str:
    whole = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            return f"{whole // size}{unit}"
    return f"{whole}s"


class FailureReporter:
    """Keeps ``channel``'s node up to date (see the module docstring); its own thread."""

    def __init__(self, channel: RunningChannel, poll_s: float = POLL_S, refresh_s: float = REFRESH_S) -> None:
        self._channel = channel
        self._poll_s = poll_s
        self._refresh_s = refresh_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._path = f"{failures_path(channel.paths)}/{channel.consumer_id}"
        # What the node says now (None: no node), and under which session it was written.
        self._shape: tuple[Any, ...] | None = None
        self._details: tuple[Any, ...] = ()
        self._session: int | None = None
        self._written_at = 0.0
        self._failing_writes = False
        self._looking = threading.Lock()  # one look at a time (the thread's, or a caller's)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="jetkafka-failure-reports", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WRITE_TIMEOUT_S + 1)
            self._thread = None
        with self._looking:
            if self._shape is not None:
                self._delete()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.look()
            except Exception:  # a view only: the next look tries again
                log.debug("failure report of %s not updated", self._channel.consumer_id, exc_info=True)

    def look(self, now: float | None = None) -> bool:
        """Write or delete the node if it is due; True when it did. ``now`` (epoch seconds) is
        when the look happens, as the report says and the refresh counts."""
        with self._looking:
            return self._look(time.time() if now is None else now)

    def _look(self, now: float) -> bool:
        channel = self._channel
        if channel.zookeeper_state() != "CONNECTED":
            return False
        failing = sorted(
            (((p.topic, p.partition), p.failure) for p in channel.partitions() if p.failure is not None),
            key=lambda kf: (kf[1].since, kf[0]),
        )
        listed = failing[:MAX_LISTED]
        client = channel.zookeeper
        session = client.client_id[0] if client.client_id else None
        if not failing:
            if self._shape is None:
                return False
            return self._delete()
        shape = (tuple((key, f.state, f.since, f.offsets) for key, f in listed), len(failing))
        details = tuple(listed)
        due = (
            shape != self._shape
            or session != self._session
            or (details != self._details and now - self._written_at >= self._refresh_s)
        )
        if not due:
            return False
        data = encode(channel.consumer_id, listed, len(failing) - len(listed), now)
        if not self._write(client, data):
            return False
        self._shape, self._details, self._session, self._written_at = shape, details, session, now
        return True

    def _write(self, client: KazooClient, data: bytes) -> bool:
        try:
            try:
                client.set_async(self._path, data).get(timeout=WRITE_TIMEOUT_S)
            except NoNodeError:
                try:
                    client.create_async(self._path, data, ephemeral=True, makepath=True).get(timeout=WRITE_TIMEOUT_S)
                except NodeExistsError:
                    client.set_async(self._path, data).get(timeout=WRITE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a view only: the next look writes it
            if not self._failing_writes:
                log.warning("failure report %s not written, trying again: %s", self._path, exc)
            self._failing_writes = True
            return False
        if self._failing_writes:
            log.info("failure report %s written again", self._path)
        self._failing_writes = False
        return True

    def _delete(self) -> bool:
        try:
            self._channel.zookeeper.delete_async(self._path).get(timeout=WRITE_TIMEOUT_S)
        except NoNodeError:
            pass  # gone with an earlier session
        except Exception as exc:  # noqa: BLE001 - the ephemeral node goes with the session anyway
            log.debug("failure report %s not deleted: %s", self._path, exc)
            return False
        self._shape, self._details, self._session = None, (), None
        return True


class FailureReportsAddOn(ChannelAddOn):
    """Runs a :class:`FailureReporter` while its channel runs (always: ``jetkafka status`` works
    without ``metrics.port``); ``start``/``stop`` on the thread that starts or stops the channel."""

    def __init__(self) -> None:
        self.reporter: FailureReporter | None = None

    def start(self, channel: RunningChannel, processor: BatchEventProcessor) -> None:
        self.reporter = FailureReporter(channel)
        self.reporter.start()

    def stop(self) -> None:
        reporter, self.reporter = self.reporter, None
        if reporter is not None:
            reporter.stop()


__all__ = [
    "FailureReport",
    "FailureReporter",
    "FailureReportsAddOn",
    "decode",
    "encode",
    "failures_path",
    "owned_failure",
    "read_failures",
    "render_failures",
]

"""Counting every delivery of channels running ``ordering: key | none``, in-process or not.

Records carry a unique decimal id as value and ``k<id % KEYS>`` as key, so a delivery's key is
known from its id wherever it was logged. :class:`KeyRecorder` logs every delivery of one
in-process owner with the *run* it belongs to (a run of one owner on one partition ends with
``on_stream_termination`` or ``on_exception``), checks as it goes that no key is in two batches
at once, and can hold chosen records to make a key slow. :func:`key_order_breaks` then checks
the per-key order within every run, whoever the owner was.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient

from jetkafka import (
    BatchEventProcessor,
    BatchResponse,
    EventBatch,
    PartitionSource,
)
from jetkafka.coordination._paths import GroupPaths
from jetkafka.ordering._commit_point import decode_commit
from tests.support.instances import SessionChannel

KEYS = 8


def keyed(ids: Iterable[int], partitions: int) -> list[tuple[int, bytes, bytes]]:
    """Records ``(partition, key, value)`` for the ``produce`` fixture: id ``i`` in partition
    ``i % partitions`` with key ``k<i % KEYS>``."""
    return [(i % partitions, f"k{i % KEYS}".encode(), str(i).encode()) for i in ids]


def key_of(ident: int) -> int:
    return ident % KEYS


@dataclass(frozen=True)
class Seen:
    owner: str
    partition: int
    run: int
    offset: int
    id: int


class KeyRecorder(BatchEventProcessor):
    """Logs each delivery at the start of its batch; ``hold(event) -> seconds`` keeps a batch
    holding such an event in hand that long (a slow key); ``gate``, when set, is waited for by
    every batch that starts while it is closed (cleared)."""

    def __init__(self, owner: str, hold: Callable[[Any], float] | None = None, exclusive_keys: bool = True) -> None:
        self.owner = owner
        self._hold = hold or (lambda event: 0.0)
        self.exclusive_keys = exclusive_keys
        self.lock = threading.Lock()
        self.seen: list[Seen] = []
        self.runs: dict[int, int] = defaultdict(int)
        self.busy: set[tuple[int, bytes | None]] = set()
        self.violations: list[str] = []
        self.terminations: list[tuple[int, int]] = []  # (partition, head offset)
        self.errors: list[tuple[int, str]] = []
        self.in_flight: dict[int, list[tuple[int, int]]] = {}  # id(batch) -> (partition, offset)s, in the processor
        self.spans: list[list[Any]] = []  # [start, end (None while in hand), ids], monotonic
        self.gate = threading.Event()
        self.gate.set()

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        p = source.partition
        keys = {(p, e.key) for e in events}
        token = id(events)
        with self.lock:
            if self.exclusive_keys and keys & self.busy:
                self.violations.append(f"{self.owner}: keys {sorted(keys & self.busy)} in two batches at once")
            self.busy |= keys
            run = self.runs[p]
            self.seen.extend(Seen(self.owner, p, run, e.offset, int(e.value or b"-1")) for e in events)
            self.in_flight[token] = [(p, e.offset) for e in events]
            span = [time.monotonic(), None, [int(e.value or b"-1") for e in events]]
            self.spans.append(span)
        try:
            self.gate.wait(60)
            delay = max(self._hold(e) for e in events)
            if delay:
                time.sleep(delay)
            return BatchResponse.advance()
        finally:
            with self.lock:
                self.busy -= keys
                del self.in_flight[token]
                span[1] = time.monotonic()

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        with self.lock:
            self.terminations.append((source.partition, source.head_offset))
            self.runs[source.partition] += 1
        return BatchResponse.advance()

    def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
        with self.lock:
            self.errors.append((source.partition, type(error).__name__))
            self.runs[source.partition] += 1
        return None

    def ids(self) -> list[int]:
        with self.lock:
            return [s.id for s in self.seen]

    def in_flight_offsets(self) -> set[tuple[int, int]]:
        """``(partition, offset)`` of every record in a batch the processor has in hand now."""
        with self.lock:
            return {po for batch in self.in_flight.values() for po in batch}


def key_order_breaks(seen: Iterable[Seen]) -> list[str]:
    """Every place where a key's records were not delivered in offset order within one run of
    one owner on one partition."""
    last: dict[tuple[str, int, int, int], int] = {}
    breaks = []
    for s in seen:
        where = (s.owner, s.partition, s.run, key_of(s.id))
        if where in last and s.offset <= last[where]:
            breaks.append(f"{where}: offset {s.offset} after {last[where]}")
        last[where] = s.offset
    return breaks


def commit_point(zk: KazooClient, topic: str, partition: int, group: str = "g") -> int | None:
    """The decoded offset node of one partition (a CommitPoint when it holds a map)."""
    path = f"{GroupPaths(group).offsets(topic)}/{partition}"
    if not zk.exists(path):
        return None
    data, _ = zk.get(path)
    return decode_commit(data, path)


class Owner(SessionChannel):
    """A channel with a ZooKeeper session of its own (a consumer id of its own, as a separate
    process would have) and a :class:`KeyRecorder` as its processor."""

    def __init__(self, config: dict[str, Any], recorder: KeyRecorder) -> None:
        self.recorder = recorder
        super().__init__(config, recorder)


def read_runs(path: str) -> list[Seen]:
    """The deliveries of an :class:`~tests.support.event_log.EventLogRecorder` file in the
    order they were logged, each with its run: a process's run on a partition ends with its
    ``on_stream_termination`` (T) or ``on_exception`` (X) line for that partition."""
    runs: dict[tuple[int, int], int] = defaultdict(int)
    out = []
    try:
        f = open(path)  # noqa: SIM115 - entered below, once a missing file is ruled out
    except FileNotFoundError:
        return []
    with f:
        for line in f:
            if not line.endswith("\n"):
                break  # a line being written right now
            kind, pid, _at, _topic, partition, a, *rest = line.split()
            where = (int(pid), int(partition))
            if kind == "D":
                out.append(Seen(pid, int(partition), runs[where], int(a), int(rest[0])))
            else:
                runs[where] += 1
    return out

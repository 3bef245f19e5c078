"""What a soak run leaves behind, as the checker reads it.

A run directory holds:

``events.log``
    every delivery and callback of every process (:mod:`tests.soak.recorder`); a delivery of
    a recovery batch ends with ``r``;
``acks.tsv``
    ``id<TAB>partition<TAB>offset<TAB>time`` for every record the broker acknowledged, ``time``
    when the producer got the acknowledgement (runs before it have three columns);
``conditions.json``
    the conditions in force when the run ended (:mod:`tests.soak.conditions`; their windows are
    in ``faults.json``);
``faults.json``
    the schedule as executed: each :class:`Fault` with its wall-clock window, the processes it
    hit and what it did (a reset's moved offsets, the offset records were deleted below, ...);
``run.json``
    the run's parameters (mode, seed, topic, group, session timeout, ...);
``zookeeper/``
    the ZooKeeper server's data directory, whose transaction log the checker replays;
``output/`` (Spark runs)
    the Parquet output, one row per event written;
``subscriber.log`` (dispatcher runs)
    every request the run's HTTP subscriber received (:mod:`tests.soak.subscriber`): the
    delivery log of a dispatcher run, where the event log holds nothing.
``mirror.tsv`` (runs with ``channel.commit_to_kafka``)
    Kafka's committed offsets of the mirror group as a lag tool reads them
    (:mod:`tests.soak.mirror_watch`): ``O <time> <partition> <offset>`` per partition of each
    poll's answer, ``F`` the same for the read after every member stopped, ``X <time> <reason>``
    a poll that failed; ``<time>`` is when the answer came.

Nothing here interprets the data: that is :mod:`tests.soak.checker`'s work.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event handed to the processor (or, in a Spark run, one row of the output)."""

    pid: int
    at: float
    topic: str
    partition: int
    offset: int
    id: int
    seq: int  # position in the event log: the order one process delivered in
    recovery: bool = False  # a recovery batch's event (``recovery.max_partition_lag``)
    # The fencing token it was sent under, when the delivery says (a dispatcher's request
    # carries ``jetkafkaepoch``); None when only the time tells the hold.
    epoch: int | None = None


@dataclass(frozen=True, slots=True)
class Callback:
    kind: str  # "T" termination, "X" exception, "R" injected failure
    pid: int
    at: float
    topic: str
    partition: int
    detail: str  # "R": the first offset of the failed batch (Spark: the batch id)
    seq: int
    count: int = 0  # "R": the events of the failed batch


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch a recorder returned from (an ``E`` line): in hand from ``start`` to ``end``."""

    pid: int
    start: float
    end: float
    topic: str
    partition: int
    first: int
    recovery: bool = False


@dataclass(frozen=True, slots=True)
class Slice:
    """A Spark run's write of one (batch id, topic, partition) slice."""

    pid: int
    at: float
    batch_id: int
    topic: str
    partition: int
    first: int
    last: int
    rows: int


@dataclass
class Fault:
    """One injected fault as executed."""

    kind: str
    start: float
    end: float
    pids: list[int] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fault:
        return cls(
            data["kind"], float(data["start"]), float(data["end"]), list(data.get("pids", [])),
            list(data.get("partitions", [])), dict(data.get("detail", {})),
        )


@dataclass
class EventLog:
    deliveries: list[Delivery] = field(default_factory=list)
    callbacks: list[Callback] = field(default_factory=list)
    slices: list[Slice] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    torn_lines: int = 0


def _lines(path: str | Path) -> Iterator[tuple[int, str, list[str]]]:
    """Each line of a log with its number and fields; nothing if the log was never written."""
    try:
        f = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - entered below, once a missing file is ruled out
    except FileNotFoundError:
        return
    with f:
        for seq, line in enumerate(f):
            yield seq, line, line.split()


def read_events(path: str | Path) -> EventLog:
    """Every complete line of an event log (a line cut short by a kill is counted, not read)."""
    out = EventLog()
    for seq, line, fields in _lines(path):
        if not line.endswith("\n") or len(fields) < 6:
            out.torn_lines += 1
            continue
        try:
            kind, pid, at = fields[0], int(fields[1]), float(fields[2])
            if kind == "D":
                recovery = len(fields) > 7 and fields[7] == "r"
                out.deliveries.append(
                    Delivery(pid, at, fields[3], int(fields[4]), int(fields[5]), int(fields[6]), seq, recovery)
                )
            elif kind == "S":
                out.slices.append(Slice(pid, at, int(fields[3]), fields[4], *map(int, fields[5:9])))
            elif kind == "E":
                recovery = len(fields) > 7 and fields[7] == "r"
                out.batches.append(Batch(pid, float(fields[6]), at, fields[3], int(fields[4]), int(fields[5]), recovery))
            else:
                count = int(fields[6]) if kind == "R" and len(fields) > 6 else 0
                out.callbacks.append(Callback(kind, pid, at, fields[3], int(fields[4]), fields[5], seq, count))
        except (ValueError, IndexError, TypeError):
            out.torn_lines += 1
    return out


@dataclass(frozen=True, slots=True)
class Request:
    """A dispatcher's request as the soak's subscriber received it (``subscriber.log``)."""

    at: float
    topic: str
    partition: int
    offset: int
    id: int
    epoch: int | None  # ``jetkafkaepoch``: the fencing token of the hold that sent it
    status: int  # what the subscriber answered: 2xx delivered, 503 an injected failure
    seq: int


def read_requests(path: str | Path) -> list[Request]:
    """Every complete line of a subscriber log: ``H <time> <topic> <partition> <offset> <id> <epoch> <status>``."""
    out: list[Request] = []
    for seq, line, fields in _lines(path):
        if not line.endswith("\n") or len(fields) != 8 or fields[0] != "H":
            continue
        epoch = None if fields[6] == "-" else int(fields[6])
        out.append(Request(float(fields[1]), fields[2], int(fields[3]), int(fields[4]), int(fields[5]), epoch, int(fields[7]), seq))
    return out


def write_acks(path: str | Path, acked: dict[int, tuple[int, int]], acked_at: dict[int, float] | None = None) -> None:
    times = acked_at or {}
    with open(path, "w") as f:
        f.writelines(
            f"{i}\t{p}\t{o}" + (f"\t{times[i]:.6f}\n" if i in times else "\n") for i, (p, o) in sorted(acked.items())
        )


def read_acks(path: str | Path) -> dict[int, tuple[int, int]]:
    acked: dict[int, tuple[int, int]] = {}
    with open(path) as f:
        for line in f:
            ident, partition, offset = line.split("\t")[:3]
            acked[int(ident)] = (int(partition), int(offset))
    return acked


def read_ack_times(path: str | Path) -> dict[int, float]:
    """When the producer got each acknowledgement (empty for a run that did not record it)."""
    times: dict[int, float] = {}
    with open(path) as f:
        for line in f:
            fields = line.split("\t")
            if len(fields) > 3:
                times[int(fields[0])] = float(fields[3])
    return times


def write_faults(path: str | Path, faults: list[Fault]) -> None:
    Path(path).write_text(json.dumps([f.as_dict() for f in faults], indent=1) + "\n")


def read_faults(path: str | Path) -> list[Fault]:
    return [Fault.from_dict(d) for d in json.loads(Path(path).read_text())]


def read_output_rows(path: str | Path) -> list[tuple[int, int, str, int, int]]:
    """``(id, batch_id, topic, partition, offset)`` of every row of a Spark run's Parquet output.

    Read with pyarrow, as files on disk: staging directories of killed writers start with a dot
    and are skipped, as Spark's readers skip them.
    """
    import pyarrow.dataset as ds

    if not Path(path).is_dir():
        return []
    table = ds.dataset(str(path), format="parquet", partitioning="hive").to_table(
        columns=["id", "batch_id", "topic", "partition", "offset"]
    )
    columns = [table.column(c).to_pylist() for c in ("id", "batch_id", "topic", "partition", "offset")]
    return [(int(i), int(b), str(t), int(p), int(o)) for i, b, t, p, o in zip(*columns, strict=True)]


@dataclass(frozen=True, slots=True)
class MirrorObservation:
    """Kafka's committed offset of one partition of the mirror group, as read at ``at``."""

    at: float
    partition: int
    offset: int
    final: bool = False  # the read after every member stopped


@dataclass
class MirrorLog:
    observations: list[MirrorObservation] = field(default_factory=list)
    failed_polls: list[tuple[float, str]] = field(default_factory=list)


def mirror_line(kind: str, at: float, partition: int, offset: int) -> str:
    """One line of ``mirror.tsv``: ``kind`` ``O`` (a poll) or ``F`` (the final read)."""
    return f"{kind}\t{at:.6f}\t{partition}\t{offset}\n"


def read_mirror(path: str | Path) -> MirrorLog:
    """Every complete line of ``mirror.tsv``, in the order the watch wrote them."""
    out = MirrorLog()
    for _seq, line, fields in _lines(path):
        if not line.endswith("\n") or not fields:
            continue
        try:
            if fields[0] in ("O", "F") and len(fields) == 4:
                out.observations.append(MirrorObservation(float(fields[1]), int(fields[2]), int(fields[3]), fields[0] == "F"))
            elif fields[0] == "X" and len(fields) >= 2:
                out.failed_polls.append((float(fields[1]), " ".join(fields[2:])))
        except ValueError:
            continue
    return out

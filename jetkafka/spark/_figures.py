"""Where a micro-batch's time goes: per-phase figures of the Spark processor.

Each committed micro-batch leaves a :class:`MicroBatchFigures`: its events, the seconds of each
phase, and what its sinks made visible. :class:`DriverStats` adds them up over the processor's
life. They reach ``SparkMicroBatchProcessor.stats()``, the metrics endpoint
(``jetkafka_spark_*``), the instance's status page, and ``jetkafka status`` (through the
ledger's per-instance node), so a user sees which part of a micro-batch is slow without a
profiler.

The phases, in order (seconds summed over the attempts of a retried micro-batch):

- ``gather``: from the micro-batch's first event to its close (a bound reached, or its
  interval); the channel's workers fill it meanwhile, while the previous one runs in Spark;
- ``wait``: from its close to the driver starting it (the previous micro-batch still running);
- ``record``: writing its ranges and batch id to ZooKeeper;
- ``build``: Arrow table to Spark DataFrame (JSON values parsed, when ``value_format: json``);
- ``fn``: the batch function (the user's Spark jobs and sink writes);
- ``commit``: the offsets and the ledger's done-mark, one ZooKeeper transaction.

Thread: written by the driver thread only; read (a copy under no lock, each field written
whole) by whoever asks for stats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# One list of phases for the driver, the metrics and status (ops does not import the spark package).
from jetkafka.ops._micro_batch_reports import PHASES

__all__ = ["PHASES", "DriverStats", "MicroBatchFigures"]


@dataclass(frozen=True)
class MicroBatchFigures:
    """One committed micro-batch."""

    batch_id: int
    replay: bool
    events: int
    partitions: int
    seconds: dict[str, float]  # phase -> seconds, every phase of PHASES
    committed_at: float  # epoch seconds
    output_files: int | None = None  # None: no jetkafka sink reported (a sink of the user's own)
    output_bytes: int | None = None

    @property
    def total_seconds(self) -> float:
        """From the micro-batch's close to its commit (gathering overlaps the previous one)."""
        return sum(s for phase, s in self.seconds.items() if phase != "gather")


@dataclass
class DriverStats:
    """Counts over the processor's life (kept across the drivers of successive starts)."""

    batches: int = 0  # micro-batches committed
    replays: int = 0  # of which replays of an earlier owner's batch
    events: int = 0  # events committed
    failures: int = 0  # fn attempts that raised
    dropped_slices: int = 0  # slices left to a partition's next owner, or voided by a reposition
    lease_waits: int = 0  # times a micro-batch waited for the local lease before running fn
    stale_refusals: int = 0  # fn attempts refused by the fence (StaleWriter)
    gather_failures: int = 0  # batches whose gathering raised and were read again
    built_ahead: int = 0  # micro-batches whose DataFrame was built while Spark ran the previous one
    last_batch_id: int | None = None
    last_batch_events: int = 0
    last_batch_seconds: float = 0.0  # build and fn of the last micro-batch
    phase_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    output_files: int = 0  # data files the sinks made visible, over every committed micro-batch
    output_bytes: int = 0
    last: MicroBatchFigures | None = None

    def committed(self, figures: MicroBatchFigures) -> None:
        self.batches += 1
        self.replays += int(figures.replay)
        self.events += figures.events
        self.last_batch_id = figures.batch_id
        self.last_batch_events = figures.events
        self.last_batch_seconds = figures.seconds["build"] + figures.seconds["fn"]
        totals = dict(self.phase_seconds)
        for phase, seconds in figures.seconds.items():
            totals[phase] = totals.get(phase, 0.0) + seconds
        self.phase_seconds = totals
        self.output_files += figures.output_files or 0
        self.output_bytes += figures.output_bytes or 0
        self.last = figures

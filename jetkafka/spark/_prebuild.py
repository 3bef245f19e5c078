"""The next micro-batch's DataFrame, built while Spark still runs the current one.

Why: on the driver thread, building a micro-batch's DataFrame (Arrow into Spark) and running
``fn`` come one after the other; under a backlog the build is about a third of the driver's
time. The open micro-batch stops taking events once it is at its ceiling
(``backlog_max_events``) while Spark is busy; from then on it can only lose slices (a partition
released, lost or repositioned), never gain events. So its DataFrame can be built then, on a
thread of its own, while ``fn`` runs.

Guarantee: a prebuilt DataFrame is used only for the micro-batch it was built from, and only if
that micro-batch still holds exactly the slices it held then (same partitions, holds,
generations and offsets) once the driver has recorded it; otherwise the driver builds it anew.
So ``fn`` sees the same rows either way. A micro-batch is never closed early for this: one
still growing is not built ahead.

Failure modes: a build that fails here is logged and left to the driver, which builds it again
(and retries ``fn`` under its own policy if that fails too). While a prebuilt DataFrame waits,
Spark holds one more micro-batch's data (at most ``backlog_max_events`` events).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from jetkafka.spark._arrow import to_table
from jetkafka.spark._batch import Collector, MicroBatch

log = logging.getLogger("jetkafka.spark")

# What a micro-batch's DataFrame depends on: per slice, the partition, its hold, generation
# and offsets.
Signature = tuple[tuple[Any, ...], ...]


def signature(batch: MicroBatch) -> Signature:
    return tuple(
        (key, id(s.hold), s.generation, s.start, s.end, s.events) for key, s in sorted(batch.slices.items())
    )


class NextDataFrame:
    """Builds the DataFrame of the open micro-batch once it is full while Spark is busy."""

    def __init__(self, collector: Collector, build: Callable[[pa.Table], Any]) -> None:
        self._collector = collector
        self._build = build
        self._lock = threading.Lock()
        self._built: tuple[MicroBatch, Signature, Any] | None = None
        self._building: MicroBatch | None = None
        self._done = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.used = 0  # prebuilt DataFrames the driver ran, for the figures and tests
        self.discarded = 0  # built but not used: the micro-batch changed

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jetkafka-spark-prebuild", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._collector.cond:
            self._collector.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def take(self, batch: MicroBatch) -> Any | None:
        """The DataFrame built ahead for ``batch``, if its slices are unchanged; None otherwise.
        Waits for a build of ``batch`` in progress."""
        with self._lock:
            while self._building is batch and not self._stop.is_set():
                self._done.wait(0.5)
            built = self._built
            if built is None or built[0] is not batch:
                return None
            self._built = None
        if built[1] != signature(batch):
            self.discarded += 1
            log.debug("micro-batch %s: changed since its DataFrame was built ahead; building it again", batch.batch_id)
            return None
        self.used += 1
        return built[2]

    def _run(self) -> None:
        while not self._stop.is_set():
            job = self._next_full()
            if job is None:
                continue
            batch, sig, chunks = job
            try:
                df = self._build(to_table(chunks))
            except Exception as exc:  # noqa: BLE001 - the driver builds it again and reports
                log.debug("micro-batch building ahead failed (%s); the driver builds it", exc)
                df = None
            with self._lock:
                self._building = None
                if df is not None:
                    self._built = (batch, sig, df)
                self._done.notify_all()

    def _next_full(self) -> tuple[MicroBatch, Signature, list[pa.RecordBatch]] | None:
        """Waits until the open micro-batch is full while Spark runs another, and was not built
        yet; returns it, its signature and its chunks, taken under the collector's lock."""
        collector = self._collector
        with collector.cond:
            while not self._stop.is_set() and not collector.stopping:
                batch = collector.open
                built = self._built
                if (
                    collector.running is not None
                    and batch.events
                    and collector.is_full()  # the condition's lock is re-entrant
                    and not (built is not None and built[0] is batch)
                ):
                    with self._lock:
                        self._building = batch
                    chunks = [c for _, s in sorted(batch.slices.items()) for c in s.chunks]
                    return batch, signature(batch), chunks
                collector.cond.wait(0.5)
        return None

"""The next micro-batch's DataFrame, built while Spark still runs the current one.

Why: on the driver thread, building a micro-batch's DataFrame (Arrow into Spark) and running
``fn`` come one after the other; under a backlog the build is about a third of the driver's
time. The open micro-batch stops taking events once it is at its ceiling
(``backlog_max_events``) while Spark is busy; it gains nothing more unless it first loses a
slice (a partition released, lost or repositioned). So its DataFrame can be built then, on a
thread of its own, while ``fn`` runs.

Guarantee: a prebuilt DataFrame is used only for the micro-batch it was built from, and only if
that micro-batch still holds exactly the slices it held then (same partitions, holds,
generations and offsets) once the driver has recorded it; otherwise the driver builds it anew.
So ``fn`` sees the same rows either way. A micro-batch is never closed early for this: one
still growing is not built ahead.

Failure modes: a build that fails here is logged and left to the driver, which builds it again
(and retries ``fn`` under its own policy if that fails too). While a prebuilt DataFrame waits,
one more copy of a micro-batch's data is held (at most ``backlog_max_events`` events; in the
JVM driver, or with Spark Connect in this process for a small one); it is let go when its
micro-batch ends, whether it ran or not, and at stop.
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
        self._done = threading.Condition(self._lock)
        self._built: tuple[MicroBatch, Signature, Any] | None = None
        self._building: MicroBatch | None = None
        self._abandoned: MicroBatch | None = None  # its build in progress is not to be kept
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.used = 0  # prebuilt DataFrames the driver ran, for the figures and tests
        self.discarded = 0  # built but not used: the micro-batch changed

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jetkafka-spark-prebuild", daemon=True)
        self._thread.start()

    def stop_soon(self) -> None:
        """No new build; a driver waiting for one goes on without it."""
        self._stop.set()
        with self._collector.cond:
            self._collector.cond.notify_all()
        with self._lock:
            self._built = None
            self._done.notify_all()

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_soon()
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

    def discard(self, batch: MicroBatch) -> None:
        """``batch`` ended (committed, emptied, abandoned): let go of what was built for it."""
        with self._lock:
            if self._built is not None and self._built[0] is batch:
                self._built = None
            if self._building is batch:
                self._abandoned = batch

    def _run(self) -> None:
        while not self._stop.is_set():
            job = self._next_full()
            if job is None:
                if self._collector.stopping:
                    break
                continue
            batch, sig, chunks = job
            df = None
            try:
                df = self._build(to_table(chunks))
            except Exception as exc:  # noqa: BLE001 - the driver builds it again and reports
                log.debug("micro-batch building ahead failed (%s); the driver builds it", exc)
            finally:
                with self._lock:
                    keep = df is not None and self._abandoned is not batch and not self._stop.is_set()
                    self._building = self._abandoned = None
                    if keep:
                        self._built = (batch, sig, df)
                    self._done.notify_all()

    def _next_full(self) -> tuple[MicroBatch, Signature, list[pa.RecordBatch]] | None:
        """Waits until the open micro-batch is full while Spark runs another and has no
        current build; returns it, its signature and its chunks, taken under the collector's
        lock. None when stopping."""
        collector = self._collector
        with collector.cond:
            while not self._stop.is_set() and not collector.stopping:
                batch = collector.open
                if collector.running is not None and batch.events and collector.is_full():  # the lock is re-entrant
                    sig = signature(batch)
                    with self._lock:
                        built = self._built
                        # Not over a build the driver has yet to take, nor again over a current one.
                        waiting = built is not None and (
                            built[0] is collector.running or (built[0] is batch and built[1] == sig)
                        )
                        if not waiting:
                            chunks = [c for _, s in sorted(batch.slices.items()) for c in s.chunks]
                            self._building = batch
                            return batch, sig, chunks
                collector.cond.wait(0.5)
        return None

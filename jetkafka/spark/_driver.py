"""The driver thread: closes micro-batches and takes each through record, ``fn`` and commit.

One micro-batch at a time, in this order:

1. *record* (new batches only): allocate the batch id and write the pending ranges, fenced
   by each partition's hold and conditional on its committed offset still being the slice's
   start (see :mod:`jetkafka.spark._ledger`). A partition refused by the fence, or moved by a
   reposition, is dropped from the batch before anything ran: its events were never processed.
2. *run*: wait while this instance's local lease is out (``ChannelContext.lease_valid``: a
   process frozen or cut off from ZooKeeper runs no ``fn``), build the DataFrame from Arrow and
   call ``fn(df, batch_id)`` (or ``fn(df, batch_id, fence)``, see :mod:`jetkafka.spark._fence`).
   If ``fn`` (or Spark) raises, nothing is committed and the same batch, same id and ranges,
   runs again after the channel's back-off (``channel.error_backoff_ms`` doubling up to
   ``error_backoff_max_ms``). So it does when the fence refused a slice for the local lease
   alone (:mod:`jetkafka.spark._fence`), even if ``fn`` returned: the slice may be unwritten.
3. *done*: commit every slice's end offset and delete its pending node, in one transaction,
   only if nothing else was written under the slice's hold since its record (checked under the
   holds' locks): an offset reset or the out-of-range policy that moved the partition meanwhile
   voids the slice, which is then neither committed nor replayed (docs/spark.md, Repositions).
   A partition refused by the fence is dropped and the rest committed again: its pending node
   stays, so the partition's new owner replays the slice under the same batch id.

Before each attempt, slices of partitions no longer held (released, lost or repositioned) are
dropped. A slice dropped while its partition is still held breaks the chain of slices (the next
one would not start at the committed offset): the partition is then forgotten by the collector,
and its next batch re-reads from the committed offset.

Thread: everything here runs on ``jetkafka-spark-driver``; the channel's workers only feed the
collector and call ``stop``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from jetkafka._backoff import backoff_ms
from jetkafka._tracing._spans import mark_failed, operation_span
from jetkafka.coordination._errors import CommitUncertain
from jetkafka.errors import CommitFenced, OffsetMoved
from jetkafka.spark._arrow import to_dataframe
from jetkafka.spark._batch import Collector, MicroBatch, Slice
from jetkafka.spark._fence import BatchFence, StaleWriter
from jetkafka.spark._figures import PHASES, DriverStats, MicroBatchFigures
from jetkafka.spark._ledger import MicroBatchLedger
from jetkafka.spark._prebuild import NextDataFrame

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jetkafka.channel._context import ChannelContext

log = logging.getLogger("jetkafka.spark")

_VERSION_CONFLICTS = (BadVersionError, NodeExistsError, NoNodeError)
_LEASE_POLL_S = 0.1


class _SliceVoid(Exception):
    """Raised inside a commit's transaction (under the holds' locks): a slice may not be written."""

    def __init__(self, key: tuple[str, int], why: str) -> None:
        super().__init__(why)
        self.key = key
        self.why = why


class MicroBatchDriver:
    def __init__(
        self,
        collector: Collector,
        ledger: MicroBatchLedger,
        context: ChannelContext,
        spark: SparkSession,
        fn: Callable[..., Any],
        value_format: str,
        schema: Any,
        stats: DriverStats | None = None,
        fence_parameter: str | None = None,
        on_committed: Callable[[MicroBatchFigures], None] | None = None,
    ) -> None:
        self.collector = collector
        self.ledger = ledger
        self.context = context
        self.spark = spark
        self.fn = fn
        self.fence_parameter = fence_parameter  # "keyword", "positional" or None
        self.value_format = value_format
        self.schema = schema
        channel = context.config.channel
        self.backoff_ms = channel.error_backoff_ms
        self.backoff_max_ms = channel.error_backoff_max_ms
        self.stats = stats if stats is not None else DriverStats()
        self.on_committed = on_committed  # called on the driver thread after each commit; must not block
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jetkafka-spark-driver", daemon=True)
        self.next_df = NextDataFrame(collector, self._build)

    def start(self) -> None:
        self._thread.start()
        self.next_df.start()

    def stop(self, timeout: float) -> bool:
        """Stop after the step in progress; True if the thread ended within ``timeout``."""
        self._stop.set()
        self.next_df.stop_soon()
        self.collector.stop()
        deadline = time.monotonic() + timeout
        self._thread.join(timeout)
        self.next_df.stop(max(0.1, deadline - time.monotonic()))
        return not self._thread.is_alive()

    def _build(self, table: Any) -> Any:
        return to_dataframe(self.spark, table, self.value_format, self.schema)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.is_set():
            batch = self.collector.take()
            if batch is None:
                break
            # One span per micro-batch: its slices as taken, its id once recorded; the commit's
            # span is its child.
            slices = [str(sl) for _, sl in sorted(batch.slices.items())]
            with operation_span("micro-batch", {"jetkafka.spark.slices": slices, "jetkafka.spark.events": batch.events}) as span:
                try:
                    self._run(batch)
                except Exception as exc:  # a bug here must not kill the thread silently and stall the channel
                    mark_failed(span, exc)
                    log.exception(
                        "micro-batch %s (%s): unexpected error; left uncommitted", batch.batch_id, batch.ranges()
                    )
                finally:
                    if batch.batch_id is not None:
                        span.set_attribute("jetkafka.spark.micro_batch_id", batch.batch_id)
                    span.set_attribute("jetkafka.spark.replay", batch.replay)
                    self.next_df.discard(batch)
                    self.collector.finished(batch)

    # -- one micro-batch -----------------------------------------------------------------------

    def _run(self, batch: MicroBatch) -> None:
        attempt = 0
        phases = dict.fromkeys(PHASES, 0.0)
        if batch.opened_at:
            phases["gather"] = max(0.0, batch.closed_at - batch.opened_at)
        phases["wait"] = max(0.0, time.monotonic() - batch.closed_at)
        while not self._stop.is_set():
            if not self._await_lease(batch):
                break
            self._prune(batch, "before running")
            if not batch.slices:
                return
            step = "record"
            try:
                if batch.batch_id is None:
                    with _timed(phases, "record"):
                        self._record(batch)
                    if not batch.slices:
                        return
                step = "fn"
                if not self._await_lease(batch):
                    break
                with _timed(phases, "build"):
                    df = self.next_df.take(batch)
                    if df is None:
                        df = self._build(batch.table())
                    else:
                        self.stats.built_ahead += 1
                with _timed(phases, "fn"):
                    fence = self._call_fn(df, batch)
                if fence.refused_for_lease:
                    # The fence said no for the lease alone, which came back: the sink may have
                    # left those slices unwritten, so committing now would lose them.
                    refused = ", ".join(f"{t}[{p}]" for t, p in sorted(fence.refused_for_lease))
                    raise StaleWriter(
                        f"the fence refused {refused} while the local lease was out; fn returned, but the micro-batch "
                        "is not committed: it runs again"
                    )
            except StaleWriter as exc:
                # Not a failure of fn: the fence said this run may not write. What is still held
                # runs again once the lease is back; what is not is dropped by the prune above.
                attempt += 1
                self.stats.stale_refusals += 1
                log.warning("micro-batch %s (%s): not written: %s", batch.batch_id, batch.ranges(), exc)
                self._stop.wait(self._backoff_ms(attempt) / 1000)
                continue
            except Exception as exc:  # noqa: BLE001 - fn is user code: any failure is retried
                attempt += 1
                if step == "fn":
                    self.stats.failures += 1
                wait_ms = self._backoff_ms(attempt)
                # ZooKeeper out of reach while recording is an outage, not a bug: no traceback.
                unreachable = step == "record" and isinstance(exc, (KazooException, CommitUncertain))
                (log.warning if unreachable else log.error)(
                    "micro-batch %s (%s): %s failed (attempt %d): %s: %s; nothing committed, retrying in %d ms",
                    batch.batch_id,
                    batch.ranges(),
                    step,
                    attempt,
                    type(exc).__name__,
                    exc,
                    wait_ms,
                    exc_info=exc if attempt == 1 and not unreachable else None,
                )
                self._stop.wait(wait_ms / 1000)
                continue
            with _timed(phases, "commit"):
                committed = self._done(batch)
            if committed:
                self._committed(batch, phases, fence)
            return
        log.warning(
            "micro-batch %s (%s): stopping before it was committed; the partitions' next owners replay it",
            batch.batch_id,
            batch.ranges(),
        )

    def _backoff_ms(self, attempt: int) -> int:
        return backoff_ms(attempt, self.backoff_ms, self.backoff_max_ms)

    def _call_fn(self, df: Any, batch: MicroBatch) -> BatchFence:
        assert batch.batch_id is not None
        fence = BatchFence(batch.batch_id, batch.slices, self.context, self.collector)
        # Also for a fn that does not take it: jetkafka's own sinks find it there.
        with fence.current():
            if self.fence_parameter is None:
                self.fn(df, batch.batch_id)
            elif self.fence_parameter == "keyword":
                self.fn(df, batch.batch_id, fence=fence)
            else:
                self.fn(df, batch.batch_id, fence)
        return fence

    def _await_lease(self, batch: MicroBatch) -> bool:
        """Wait while the local lease is out (False if stopping meanwhile).

        A process that was frozen, or cut off from ZooKeeper, for about its session timeout may
        have lost its partitions without knowing yet: no ``fn`` may run (and write) before
        ZooKeeper answers again. By then a lost session has been reported, and the prune that
        follows drops the slices of every partition lost meanwhile.
        """
        if self.context.lease_valid():
            return True
        self.stats.lease_waits += 1
        waited = time.monotonic()
        log.warning(
            "micro-batch %s (%s): no answer from ZooKeeper within the local lease; its function does not run "
            "until ZooKeeper answers (partitions lost meanwhile are dropped from it)",
            batch.batch_id,
            batch.ranges(),
        )
        while not self._stop.wait(_LEASE_POLL_S):
            if self.context.lease_valid():
                log.info(
                    "micro-batch %s: ZooKeeper answered again after %.1f s", batch.batch_id, time.monotonic() - waited
                )
                return True
        return False

    def _prune(self, batch: MicroBatch, when: str) -> None:
        for s in list(batch.slices.values()):
            if self.context.hold(*s.key) is not s.hold:
                self._drop(batch, s, f"no longer held {when}")
            elif not self.collector.is_current(s):
                self._void(batch, s, f"repositioned or given up {when}")

    def _drop(self, batch: MicroBatch, s: Slice, why: str) -> None:
        batch.drop(s.key)
        self.stats.dropped_slices += 1
        log.warning(
            "micro-batch %s: %s offsets %d..%d dropped (%s); %s",
            batch.batch_id,
            f"{s.topic}[{s.partition}]",
            s.start,
            s.end - 1,
            why,
            "its next owner replays them" if batch.batch_id is not None else "its next owner reads them again",
        )

    def _void(self, batch: MicroBatch, s: Slice, why: str) -> None:
        """Drop a slice that must not be written, and re-synchronise its partition if this
        instance still holds it: the partition's next batch re-reads from the committed offset."""
        batch.drop(s.key)
        self.stats.dropped_slices += 1
        current = self.collector.is_current(s)
        if current:
            self.collector.forget(s.key)
        log.warning(
            "micro-batch %s: %s[%d] offsets %d..%d not committed (%s)%s",
            batch.batch_id,
            s.topic,
            s.partition,
            s.start,
            s.end - 1,
            why,
            "; the partition is read again from its committed offset" if current else "",
        )

    def _record(self, batch: MicroBatch) -> None:
        for _ in range(100):
            self._prune(batch, "when recording")
            for s in list(batch.slices.values()):
                committed = s.hold.committed
                if committed != s.start:
                    self._void(batch, s, f"the committed offset is {committed}, not the slice's start")
            if not batch.slices:
                return
            keys = sorted(batch.slices)
            next_id, counter_version = self.ledger.read_counter()
            existing = self.collector.stale_versions(keys)
            ranges = {k: (batch.slices[k].start, batch.slices[k].end) for k in keys}
            versions: dict[tuple[str, int], int] = {}
            recorded: dict[tuple[str, int], int] = {}

            def add(tx: Any) -> None:
                # Under the holds' locks: a reposition is either before (and seen here) or after.
                for k in keys:
                    s = batch.slices[k]
                    if not self.collector.is_current(s):
                        raise _SliceVoid(k, "repositioned or given up while being recorded")
                    recorded[k] = s.hold.offset_version + 1  # this transaction's write comes next
                versions.update(self.ledger.add_record(tx, next_id, counter_version, ranges, existing))

            try:
                if not self._commit(batch, {k: ranges[k][0] for k in keys}, add):
                    continue
            except _VERSION_CONFLICTS:
                # Another instance took a batch id meanwhile, or a leftover pending node is in the
                # way: read both again and retry.
                for key, pending in self.ledger.pending_versions(keys).items():
                    self.collector.set_stale(key, None if pending is None else pending.version)
                continue
            batch.batch_id = next_id
            for k in keys:
                batch.slices[k].pending_version = versions[k]
                batch.slices[k].recorded_version = recorded[k]
                self.collector.set_stale(k, None)
            log.info("micro-batch %d recorded: %s (%d events)", next_id, batch.ranges(), batch.events)
            return
        raise RuntimeError("could not record the micro-batch: batch id or pending nodes kept changing")

    def _commit(self, batch: MicroBatch, offsets: dict[tuple[str, int], int], add: Callable[[Any], None]) -> bool:
        """Commit ``offsets`` for the batch's slices, each expected at its slice's start, with
        ``add``'s ledger writes in the same transaction. False when a slice had to go (fenced,
        repositioned, or voided by ``add``): the caller tries again with the rest. Version
        conflicts of the ledger's nodes and CommitUncertain are the caller's to handle."""
        keys = sorted(batch.slices)
        try:
            self.context.commit(
                offsets,
                extra=add,
                holds={k: batch.slices[k].hold for k in keys},
                expected={k: batch.slices[k].start for k in keys},
            )
        except CommitFenced as exc:
            self._drop_fenced(batch, exc)
            return False
        except OffsetMoved as exc:
            self._void_key(batch, (exc.topic, exc.partition), f"repositioned to offset {exc.actual}")
            return False
        except _SliceVoid as exc:
            self._void_key(batch, exc.key, exc.why)
            return False
        return True

    def _void_key(self, batch: MicroBatch, key: tuple[str, int], why: str) -> None:
        s = batch.slices.get(key)
        if s is None:
            raise RuntimeError(f"{key[0]}[{key[1]}] refused a micro-batch commit it is not part of: {why}")
        self._void(batch, s, why)

    def _drop_fenced(self, batch: MicroBatch, exc: CommitFenced) -> None:
        """A commit named a partition this instance lost: drop its slice (raise if not in the batch)."""
        s = batch.slices.get((exc.topic, exc.partition))
        if s is None:
            raise exc
        self._drop(batch, s, "partition not held any more")

    def _done(self, batch: MicroBatch) -> bool:
        """Commit the micro-batch's slices still held; True when any was committed."""
        attempt = 0
        while not self._stop.is_set():
            self._prune(batch, "when committing")
            if not batch.slices:
                return False
            keys = sorted(batch.slices)
            offsets = {k: batch.slices[k].end for k in keys}
            versions: dict[tuple[str, int], int] = {}
            for k in keys:
                version = batch.slices[k].pending_version
                assert version is not None, f"{batch.slices[k]}: committing a slice never recorded"
                versions[k] = version

            def add(tx: Any) -> None:
                # Under the holds' locks, where every write of this instance for the partition
                # happens: a version other than the one the record left means a reposition
                # (reset, out of range) landed since; the slice's end must not overwrite it.
                for k in keys:
                    s = batch.slices[k]
                    if s.hold.offset_version != s.recorded_version:
                        raise _SliceVoid(k, "the partition was repositioned after the slice was recorded")
                self.ledger.add_done(tx, versions)

            try:
                if not self._commit(batch, offsets, add):
                    continue
            except _VERSION_CONFLICTS:
                # A pending node changed under us: someone finished or replaced that slice.
                current = self.ledger.pending_versions(keys)
                for k in keys:
                    pending = current[k]
                    if pending is None or pending.version != versions[k] or pending.batch_id != batch.batch_id:
                        self._void(batch, batch.slices[k], "its pending range was finished or replaced elsewhere")
                continue
            except CommitUncertain as exc:
                attempt += 1
                wait_ms = self._backoff_ms(attempt)
                log.warning(
                    "micro-batch %s (%s): commit postponed, ZooKeeper unreachable (%s); retrying in %d ms",
                    batch.batch_id,
                    batch.ranges(),
                    exc,
                    wait_ms,
                )
                self._stop.wait(wait_ms / 1000)
                continue
            return True
        return False

    def _committed(self, batch: MicroBatch, phases: dict[str, float], fence: BatchFence) -> None:
        assert batch.batch_id is not None
        figures = MicroBatchFigures(
            batch_id=batch.batch_id,
            replay=batch.replay,
            events=batch.events,
            partitions=len(batch.slices),
            seconds=dict(phases),
            committed_at=time.time(),
            output_files=fence.output_files,
            output_bytes=fence.output_bytes,
        )
        self.stats.committed(figures)
        if self.on_committed is not None:
            try:
                self.on_committed(figures)
            except Exception:  # figures only: the micro-batch is committed whatever happens here
                log.warning("micro-batch %s: its figures were not reported", batch.batch_id, exc_info=True)
        log.info(
            "micro-batch %s%s committed: %s, %d events; gather %.2f s, record %.2f s, build %.2f s, fn %.2f s, "
            "commit %.2f s%s",
            batch.batch_id,
            " (replay)" if batch.replay else "",
            batch.ranges(),
            batch.events,
            phases["gather"],
            phases["record"],
            phases["build"],
            phases["fn"],
            phases["commit"],
            "" if fence.output_files is None else f"; {fence.output_files} file(s), {fence.output_bytes} bytes",
        )


@contextmanager
def _timed(phases: dict[str, float], phase: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        phases[phase] += time.perf_counter() - started

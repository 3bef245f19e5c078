"""Per-minute purchase aggregates, written exactly once with :class:`jetkafka.spark.ParquetSink`.

Each micro-batch writes *partial* aggregates per (topic, partition, minute): count, sum and
maximum of the amounts. Keeping topic and partition in the output is what makes it idempotent
(a replayed slice overwrites its own rows). The final per-minute figures are a roll-up over the
partials, on the read side (:func:`rollup`); counts, sums and maxima roll up exactly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from jetkafka.spark import BatchFence, ParquetSink

MINUTE_MS = 60_000


def minute_partials(df: Any) -> Any:
    """Partial aggregates of one micro-batch, from the processor's DataFrame (value_format json)."""
    from pyspark.sql import functions as F

    events = df.where(F.col("value.id").isNotNull())  # malformed JSON parses to null fields
    return events.groupBy(
        "topic",
        "partition",
        (F.floor(F.col("value.ts") / MINUTE_MS) * MINUTE_MS).alias("minute"),
    ).agg(
        F.count(F.lit(1)).alias("events"),
        F.sum("value.cents").alias("cents"),
        F.max("value.cents").alias("max_cents"),
    )


def minute_writer(path: str) -> Callable[..., None]:
    """The batch function: ``fn(df, batch_id, fence)`` writing partial aggregates to Parquet at
    ``path``; the fence keeps a stale run (a frozen instance, a lost partition) from publishing.

    Named in YAML as ``fn: examples.pipeline.aggregates:minute_writer`` with
    ``fn_options: {path: ...}``.
    """
    # The aggregate of a slice is a few rows that Spark's adaptive execution already writes as one
    # file per slice; the sink's own repartition to one file would only add a shuffle (about a
    # sixth of the write's time here, docs/performance.md).
    sink = ParquetSink(path, one_file_per_slice=False)

    def write_minutes(df: Any, batch_id: int, fence: BatchFence | None = None) -> None:
        sink.write(minute_partials(df), batch_id, fence)

    return write_minutes


def rollup(partials: Any) -> Any:
    """Per-minute totals over every partition and micro-batch: (minute, events, cents, max_cents)."""
    from pyspark.sql import functions as F

    return (
        partials.groupBy("minute")
        .agg(F.sum("events").alias("events"), F.sum("cents").alias("cents"), F.max("max_cents").alias("max_cents"))
        .orderBy("minute")
    )


def python_minutes(events: Iterable[dict[str, Any]]) -> dict[int, tuple[int, int, int]]:
    """The same roll-up computed in plain Python: minute -> (events, cents, max_cents)."""
    acc: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in events:
        row = acc[e["ts"] // MINUTE_MS * MINUTE_MS]
        row[0] += 1
        row[1] += e["cents"]
        row[2] = max(row[2], e["cents"])
    return {minute: (n, cents, top) for minute, (n, cents, top) in acc.items()}

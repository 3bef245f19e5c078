"""Idempotent sinks: output keyed by (batch_id, topic, partition), replaced on replay.

A micro-batch may run more than once (``fn`` failed and was retried, or its instance died before
committing and the partitions' next owners replay it). Every run of a batch id covers the same
offset ranges, but replays are per partition: each new owner replays only its own partitions'
slices. A sink is idempotent when writing the rows of slice (batch_id, topic, partition)
replaces whatever an earlier run wrote for that slice, and touches nothing else.

:class:`ParquetSink` does this with Hive-style directories that end in
``batch_id=<id>/topic=<t>/partition=<p>`` and Spark's *dynamic* partition overwrite: a write
replaces exactly the directories its rows fall into. Spark stages the files of a write under
``<path>/.spark-staging-<job>`` and moves them into place when the job commits, so readers
never see a half-written slice; staging left behind by a killed process starts with ``.`` and
is ignored by readers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("jetkafka.spark")

SLICE_COLUMNS = ("batch_id", "topic", "partition")


class ParquetSink:
    """Write each micro-batch's rows to Parquet under ``path``, idempotently.

    The DataFrame must carry the ``topic`` and ``partition`` of each row (the event columns, or
    group keys of an aggregate); the sink adds ``batch_id``. ``partition_by`` names further
    directory levels put before the slice columns (``["day"]`` gives
    ``day=2024-05-01/batch_id=7/topic=orders/partition=3``). ``options`` go to the writer
    (``compression: zstd``). The sink is callable as ``fn(df, batch_id)``.
    """

    def __init__(
        self,
        path: str,
        partition_by: Sequence[str] | str | None = None,
        options: Mapping[str, str] | None = None,
    ) -> None:
        if not path:
            raise ValueError("ParquetSink needs a path")
        columns = [partition_by] if isinstance(partition_by, str) else list(partition_by or ())
        clash = [c for c in columns if c in SLICE_COLUMNS]
        if clash:
            raise ValueError(
                f"partition_by {clash} repeats the slice columns {', '.join(SLICE_COLUMNS)}, which the sink adds itself"
            )
        self.path = path
        self.partition_by = tuple(columns)
        self.options = dict(options or {})

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.write(df, batch_id)

    def write(self, df: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        missing = [c for c in ("topic", "partition") if c not in df.columns]
        if missing:
            raise ValueError(
                f"ParquetSink: the DataFrame has no column {', '.join(missing)}; keep topic and partition in it "
                "(group by them in aggregates) so each slice of the micro-batch is replaced on replay"
            )
        if "batch_id" in df.columns:
            raise ValueError("ParquetSink: the DataFrame already has a batch_id column; the sink adds it")
        absent = [c for c in self.partition_by if c not in df.columns]
        if absent:
            raise ValueError(f"ParquetSink: partition_by column(s) {absent} are not in the DataFrame")
        out = df.withColumn("batch_id", F.lit(batch_id).cast("long"))
        writer = out.write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
        for key, value in self.options.items():
            writer = writer.option(key, value)
        writer.partitionBy(*self.partition_by, *SLICE_COLUMNS).parquet(self.path)
        log.info("ParquetSink: micro-batch %d written to %s", batch_id, self.path)

    def read(self, spark: SparkSession) -> DataFrame:
        """Everything written so far, with ``topic`` as a string even for topics named like numbers."""
        from pyspark.sql import functions as F

        df = spark.read.option("basePath", self.path).parquet(self.path)
        return df.withColumn("topic", F.col("topic").cast("string"))

    def __repr__(self) -> str:
        return f"ParquetSink({self.path!r}, partition_by={list(self.partition_by)!r})"

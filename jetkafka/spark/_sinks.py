"""Idempotent sinks: output keyed by (batch_id, topic, partition), written once per slice.

A micro-batch may run more than once (``fn`` failed and was retried, or its instance died before
committing and the partitions' next owners replay it). Every run of a batch id covers the same
offset ranges, but replays are per partition: each new owner replays only its own partitions'
slices. A sink is idempotent when the output of slice (batch_id, topic, partition) ends up as
one run's rows for that slice, whatever the other runs did, and nothing else is touched.

:class:`ParquetSink` writes Hive-style directories ending in
``batch_id=<id>/topic=<t>/partition=<p>``. A write has two steps:

1. *stage*: Spark writes the micro-batch under a staging directory of this write's own,
   ``<path>/_jetkafka-staging/b<id>-<random>`` (readers skip names starting with ``_``), as
   ``topic=<t>/partition=<p>`` leaves: the batch id is in the staging directory's name, not a
   column, so the plan Spark compiles is the same for every micro-batch (a literal batch id
   made Spark generate and compile the write's code anew each time);
2. *publish*: each leaf slice directory is moved into place, under ``batch_id=<id>``, with a
   rename that fails when the target exists (:mod:`jetkafka.spark._publish`), then the staging
   directory is removed.

A published slice is never deleted or replaced: every run of (batch id, slice) covers the same
recorded offset range, so the first complete publication is as good as any later one, and a
writer that cannot delete cannot destroy what a newer owner of the partition published. With a
fence (``fn(df, batch_id, fence)``, see :mod:`jetkafka.spark._fence`), each slice is published
only while this instance's lease runs and it still holds the slice's partition: a stale run
(frozen past its session, lost or repositioned partition) publishes nothing, and a check that
passes just before a freeze still cannot replace the new owner's slice.

Failure modes: a process killed mid-publication leaves some slices published (complete, each
one rename) and its staging directory behind; the replay publishes the rest, and leftover
staging is ignored by readers (delete it when no write is running). Guarantees per storage
(local files, HDFS, object stores) are in docs/spark.md.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote

from jetkafka.spark._compaction import SOURCE_PREFIX
from jetkafka.spark._compaction_journal import read_records
from jetkafka.spark._fence import current_fence
from jetkafka.spark._publish import OBJECT_STORE_SCHEMES, REFUSE_EXISTING, SinkError, SliceFiles, files_for, scheme_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jetkafka.spark._fence import BatchFence

log = logging.getLogger("jetkafka.spark")

SLICE_COLUMNS = ("batch_id", "topic", "partition")
STAGED_COLUMNS = SLICE_COLUMNS[1:]  # batch_id is added by the path when a slice is published
STAGING_DIR = "_jetkafka-staging"


@dataclass
class Publication:
    """What one publication did with each leaf slice directory (paths relative to the sink)."""

    published: list[str] = field(default_factory=list)  # moved into place by this write
    existing: list[str] = field(default_factory=list)  # already published by an earlier run: kept
    skipped: list[str] = field(default_factory=list)  # not published: the fence said not held
    files: int = 0  # data files in the slices this write published
    bytes: int = 0  # and their size

    def published_slices(self) -> set[tuple[str, int]]:
        """(topic, partition) of every slice this write made visible."""
        return {key for key in map(_slice_of, self.published) if key is not None}


@dataclass
class StagedWrite:
    """A micro-batch written to its staging directory and not yet published."""

    sink: ParquetSink
    batch_id: int
    staging: str
    files: SliceFiles
    leaves: list[str]  # where each staged leaf slice directory is published, relative to the sink

    def publish(self, fence: BatchFence | None = None) -> Publication:
        """Move each staged slice into place unless one is there already; with ``fence`` (or the
        micro-batch's own, :func:`~jetkafka.spark._fence.current_fence`), only while it holds,
        each check and publication made with the partition's lease held still. Raises
        :class:`~jetkafka.spark._fence.StaleWriter` when the fence's lease ran out (slices
        published before that stay; the micro-batch runs again), and :class:`SinkError`, before
        publishing anything, when a staged slice is not one of the fence's (rows whose topic or
        partition is not a slice of the micro-batch). The staging directory is removed."""
        fence = fence if fence is not None else current_fence()
        result = Publication()
        try:
            if fence is not None:
                self._check_slices(fence)
            for leaf in self.leaves:
                key = _slice_of(leaf)
                if fence is None or key is None:
                    self._publish(leaf, result)
                    continue
                with fence.publishing(*key) as allowed:
                    if allowed:
                        self._publish(leaf, result)
                    else:
                        result.skipped.append(leaf)
        finally:
            self.discard()
        if fence is not None:
            fence.note_output(result.files, result.bytes)
        log.info(
            "ParquetSink: micro-batch %d: %d slice(s) published to %s, %d already there (kept)%s",
            self.batch_id,
            len(result.published),
            self.sink.path,
            len(result.existing),
            f", {len(result.skipped)} not held any more (not published)" if result.skipped else "",
        )
        if result.skipped:
            log.warning(
                "ParquetSink: micro-batch %d: not published, their partitions are no longer this instance's: %s",
                self.batch_id,
                ", ".join(result.skipped),
            )
        return result

    def _check_slices(self, fence: BatchFence) -> None:
        """Refuse a write with a slice the fence does not vouch for: no run of the micro-batch
        recorded it, so nothing would ever replay, commit or fence it."""
        ours = fence.tokens
        foreign: set[str] = set()
        for leaf in self.leaves:
            key = _slice_of(leaf)
            if key is None:
                foreign.add(f"{leaf} (no topic or partition)")
            elif key not in ours:
                foreign.add(f"{key[0]}[{key[1]}]")
        if not foreign:
            return
        named = sorted(foreign)
        raise SinkError(
            f"ParquetSink: micro-batch {self.batch_id}: the DataFrame holds rows of {', '.join(named)}, which is not "
            f"a slice of micro-batch {self.batch_id} (its slices: "
            f"{', '.join(f'{t}[{p}]' for t, p in sorted(ours)) or 'none'}); nothing was published\n"
            "  fix: keep each row's topic and partition as the micro-batch's events carry them "
            "(group by them, never compute or rename them)"
        )

    def _publish(self, leaf: str, result: Publication) -> None:
        target = self.files.join(self.sink.path, leaf)
        staged = self.files.join(self.staging, _without_batch_id(leaf, len(self.sink.partition_by)))
        files, nbytes = self.files.data_files(staged)
        if self.files.publish(staged, target):
            result.published.append(leaf)
            result.files += files
            result.bytes += nbytes
        else:
            result.existing.append(leaf)

    def discard(self) -> None:
        """Remove the staging directory (what was published is not in it any more)."""
        self.files.remove_tree(self.staging)


def _with_batch_id(staged_leaf: str, depth: int, batch_id: int) -> str:
    """The published path of a staged leaf: ``batch_id=<id>`` after the ``partition_by`` levels."""
    parts = staged_leaf.replace("\\", "/").split("/")
    return "/".join([*parts[:depth], f"batch_id={batch_id}", *parts[depth:]])


def _without_batch_id(leaf: str, depth: int) -> str:
    """Where a published path's leaf was staged (the inverse of :func:`_with_batch_id`)."""
    parts = leaf.replace("\\", "/").split("/")
    return "/".join(parts[:depth] + parts[depth + 1:])


def _slice_of(leaf: str) -> tuple[str, int] | None:
    """(topic, partition) of a leaf path ending in ``topic=<t>/partition=<p>``."""
    parts = leaf.replace("\\", "/").split("/")
    if len(parts) < 2 or not parts[-2].startswith("topic=") or not parts[-1].startswith("partition="):
        return None
    try:
        return unquote(parts[-2][len("topic="):]), int(unquote(parts[-1][len("partition="):]))
    except ValueError:
        return None


class ParquetSink:
    """Write each micro-batch's rows to Parquet under ``path``, idempotently.

    The DataFrame must carry the ``topic`` and ``partition`` of each row (the event columns, or
    group keys of an aggregate); the sink adds ``batch_id``. ``partition_by`` names further
    directory levels put before the slice columns (``["day"]`` gives
    ``day=2024-05-01/batch_id=7/topic=orders/partition=3``). ``options`` go to the writer
    (``compression: zstd``). The sink is callable as ``fn(df, batch_id)`` or
    ``fn(df, batch_id, fence)``.

    File sizing: by default each leaf directory of a write gets one file (``one_file_per_slice``:
    the rows are repartitioned by the directory columns before the write, so each directory's
    rows reach one Spark task); without it, every task holding rows of a directory writes a file
    there, up to ``spark.sql.shuffle.partitions`` small files per slice and micro-batch.
    ``max_records_per_file`` bounds the rows of one file (Spark's ``maxRecordsPerFile``): a big
    slice is then cut into several files of at most that many rows. Neither changes what is
    written, only how it is cut into files; :func:`~jetkafka.spark._compaction.compact` merges
    the files of finished micro-batches afterwards.
    """

    def __init__(
        self,
        path: str,
        partition_by: Sequence[str] | str | None = None,
        options: Mapping[str, str] | None = None,
        *,
        one_file_per_slice: bool = True,
        max_records_per_file: int | None = None,
    ) -> None:
        if not path:
            raise ValueError("ParquetSink needs a path")
        if max_records_per_file is not None:
            max_records_per_file = int(max_records_per_file)  # YAML values from the environment are strings
            if max_records_per_file < 1:
                raise ValueError(f"max_records_per_file must be >= 1, got {max_records_per_file}")
        columns = [partition_by] if isinstance(partition_by, str) else list(partition_by or ())
        clash = [c for c in columns if c in SLICE_COLUMNS]
        if clash:
            raise ValueError(
                f"partition_by {clash} repeats the slice columns {', '.join(SLICE_COLUMNS)}, which the sink adds itself"
            )
        self.path = path.rstrip("/") or path
        self.partition_by = tuple(columns)
        self.options = dict(options or {})
        self.one_file_per_slice = bool(one_file_per_slice)
        self.max_records_per_file = max_records_per_file
        scheme = scheme_of(path)
        if scheme in OBJECT_STORE_SCHEMES:
            log.warning(
                "ParquetSink at %s: on %s:// a rename is a copy, so publishing a slice is neither atomic nor "
                "exclusive: readers can see half a slice and two runs of one slice can both land; "
                "use a table format (Delta Lake, Iceberg) there, see docs/spark.md",
                path,
                scheme,
            )

    def __call__(self, df: DataFrame, batch_id: int, fence: BatchFence | None = None) -> None:
        self.write(df, batch_id, fence)

    def write(self, df: DataFrame, batch_id: int, fence: BatchFence | None = None) -> Publication:
        """Stage the micro-batch's rows, then publish each slice not published yet (with
        ``fence``: only those this instance still holds)."""
        return self.stage(df, batch_id).publish(fence)

    def stage(self, df: DataFrame, batch_id: int) -> StagedWrite:
        """Write the rows under a staging directory of this write's own; nothing is visible yet."""
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
        files = files_for(df.sparkSession, self.path)
        staging = files.join(files.join(self.path, STAGING_DIR), f"b{batch_id}-{uuid.uuid4().hex[:12]}")
        out = df
        if self.one_file_per_slice:
            out = out.repartition(*(F.col(c) for c in (*self.partition_by, "topic", "partition")))
        writer = out.write.mode(REFUSE_EXISTING)
        if self.max_records_per_file is not None:
            writer = writer.option("maxRecordsPerFile", str(self.max_records_per_file))
        for key, value in self.options.items():
            writer = writer.option(key, value)
        try:
            writer.partitionBy(*self.partition_by, *STAGED_COLUMNS).parquet(staging)
            depth = len(self.partition_by)
            leaves = [_with_batch_id(leaf, depth, batch_id) for leaf in files.leaves(staging, depth + len(STAGED_COLUMNS))]
        except BaseException:
            files.remove_tree(staging)
            raise
        return StagedWrite(self, batch_id, staging, files, leaves)

    def read(self, spark: SparkSession) -> DataFrame:
        """Everything written so far, with ``topic`` as a string even for topics named like numbers.

        Rows of compacted micro-batches (:func:`~jetkafka.spark._compaction.compact`) come from
        the compacted files with their own ``batch_id``; anything else in a compacted range (a
        late file of a stale writer) is left out. A compaction running meanwhile can hide its
        range from this read (see :mod:`jetkafka.spark._compaction`), never show a row twice.
        """
        from pyspark.errors import AnalysisException
        from pyspark.sql import functions as F

        # The records first, the tree after: a compaction moves its sources away before it
        # records itself, so a record seen here means its sources are gone from the listing below.
        records = read_records(self.path)
        if not records:
            df = spark.read.option("basePath", self.path).parquet(self.path)
            return df.withColumn("topic", F.col("topic").cast("string"))
        compacted = spark.read.parquet(*(os.path.join(self.path, f) for r in records for f in r.files))
        compacted = compacted.withColumn("topic", F.col("topic").cast("string"))
        try:
            tree = spark.read.option("basePath", self.path).option("pathGlobFilter", f"{SOURCE_PREFIX}*").parquet(self.path)
        except AnalysisException:  # no file left outside the compacted ones: nothing to infer a schema from
            return compacted
        in_compacted = functools.reduce(
            lambda a, b: a | b, (F.col("batch_id").between(r.first, r.last) for r in records)
        )
        tree = tree.where(~in_compacted).withColumn("topic", F.col("topic").cast("string"))
        aligned = compacted.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in tree.schema.fields))
        return tree.unionByName(aligned)

    def __repr__(self) -> str:
        return (
            f"ParquetSink({self.path!r}, partition_by={list(self.partition_by)!r}, "
            f"one_file_per_slice={self.one_file_per_slice}, max_records_per_file={self.max_records_per_file})"
        )

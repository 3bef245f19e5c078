"""Compaction of a ParquetSink's finished output: a closed range of batch directories into few files.

:func:`compact` rewrites the rows of micro-batches ``first..last`` (every ``part-*`` file of
their slice directories) into one file per ``partition_by`` value, topic and partition (or
files of at most ``max_records_per_file`` rows), keeping every row and its ``batch_id``.

*Closed*: every batch id of the range must be below the group's first unfinished batch id
(:meth:`~jetkafka.spark._ledger.MicroBatchLedger.finished_below`: the batch-id counter and every
pending range's batch id). Ids only grow and only recorded pending ranges are replayed, so no
run of a closed batch can start again and nothing the sink writes can land in the range later;
otherwise :class:`CompactionRefused` says which pending range holds it back.

Where the rows go: a compacted file holds the rows *with* their ``batch_id``, ``topic``,
``partition`` and ``partition_by`` columns as data, under the range's first batch directory,
``[<partition_by>/]batch_id=<first>/topic=<t>/partition=<p>/compacted-<first>-<last>-<n>.parquet``.
So the Hive layout stays as it was and

* :meth:`ParquetSink.read <jetkafka.spark._sinks.ParquetSink.read>` gives every row with its
  own batch id: it reads the files of finished compactions (listed in their journal) by
  themselves and the rest of the tree without the compacted range;
* a plain ``spark.read.parquet(path)`` sees every row once too, but with the range's first
  batch id as ``batch_id`` (Spark takes partition columns from directory names).

Steps, each recorded in the journal ``<path>/_jetkafka-compaction/<first>-<last>/`` (readers
skip names starting with ``_``):

1. ``plan.json``: the source files (every ``part-*`` file of the range's slice directories);
2. Spark writes the compacted rows under the journal's ``staged/`` directory;
3. ``moves.json``: where each staged file goes. From here on the compaction rolls forward;
4. every source file is moved into the journal's ``removed/`` (the range disappears for
   readers; emptied slice, topic and batch directories are removed), then every staged file
   is moved into place;
5. ``done.json``: the compaction's record (range, files, rows); ``removed/`` and ``staged/``
   are deleted.

A crash at any point is repaired by the next :func:`compact` on the sink (any range): a journal
without ``moves.json`` is undone (deleted: nothing visible had changed), one with it is finished.
Steps 4 and 5 and the repair are :mod:`jetkafka.spark._compaction_journal`'s.

What a reader running meanwhile sees: never a row twice, because no compacted file is in place
before every source file has left the tree. Between step 4's first move and ``done.json``,
``ParquetSink.read`` misses the range (in part or whole); a plain reader misses it until the
compacted files are moved in (each file shows as it lands). A query that listed the files
before step 4 and reads them after fails with a missing file rather than reading wrong rows.

One compaction runs at a time per group: each holds the ephemeral node
``/consumers/<group>/microbatches/compaction`` while it works, and a second one is refused
(it would repair, that is undo, the first one's journal while that one is still staging).
Two groups must not compact the same sink path. Local paths and shared mounts only (``file:``);
other filesystems raise :class:`~jetkafka.spark._publish.SinkError`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote

from kazoo.client import KazooClient

from jetkafka.coordination._paths import GroupPaths
from jetkafka.spark._compaction_journal import (
    JOURNAL_DIR,
    SLICE_LEVELS,
    CompactionRecord,
    journals,
    local_root,
    read_records,
    repair,
    roll_forward,
    write_json,
)
from jetkafka.spark._compaction_slot import CompactionRefused, CompactionSlot, compaction_slot
from jetkafka.spark._ledger import MicroBatchLedger
from jetkafka.spark._publish import REFUSE_EXISTING, SinkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jetkafka.spark")

SOURCE_PREFIX = "part-"  # every file Spark's Parquet writer makes
COMPACTED_PREFIX = "compacted-"
# Prefix of the staging write's directory columns, copies of the real ones (Spark's partitionBy
# takes a column out of the files; the real one must stay in). Not "_": Spark skips those.
_COPY = "jetkafka_dir_"


class SinkLayout(Protocol):
    """What compaction needs of a :class:`~jetkafka.spark._sinks.ParquetSink` (which reads
    this module's records, so this module names it by shape, not by import)."""

    @property
    def path(self) -> str: ...

    @property
    def partition_by(self) -> Sequence[str]: ...

    @property
    def options(self) -> Mapping[str, str]: ...


def check_closed(zookeeper: KazooClient, group: str, first: int, last: int) -> None:
    """Raise :class:`CompactionRefused` unless every batch id of ``first..last`` is finished in
    ``group``'s micro-batch ledger (see :meth:`MicroBatchLedger.finished_below`)."""
    ledger = MicroBatchLedger(zookeeper, GroupPaths(group), "compaction")
    below, pending = ledger.finished_below()
    if last < below:
        return
    holding = [p for p in pending if p.batch_id <= last]
    if holding:
        ranges = ", ".join(
            f"{p.topic}[{p.partition}] batch {p.batch_id} offsets {p.start}..{p.end - 1}"
            + (f" (recorded by {p.consumer})" if p.consumer else "")
            for p in holding[:5]
        )
        raise CompactionRefused(
            f"cannot compact micro-batches {first}..{last} of group {group}: pending range(s) {ranges} "
            f"may still be replayed, so batches from {below} on are not finished\n"
            f"  fix: compact up to batch {below - 1}, or wait until the group has committed them"
        )
    raise CompactionRefused(
        f"cannot compact micro-batches {first}..{last} of group {group}: batch ids from {below} on have not run yet "
        f"(the group's next batch id is {below})\n  fix: compact up to batch {below - 1}"
    )


def compact(
    spark: SparkSession,
    sink: SinkLayout,
    first: int,
    last: int,
    *,
    zookeeper: KazooClient,
    group: str,
    max_records_per_file: int | None = None,
) -> CompactionRecord | None:
    """Rewrite micro-batches ``first..last`` of ``sink`` into few files, keeping every row once.

    Checks first that the range is closed in ``group``'s micro-batch ledger (``zookeeper`` is a
    started client rooted where the group's channels run), and repairs any compaction a crash
    left half done (see the module's documentation). Returns the record of this compaction, or
    None when the range holds no files; the same range compacted again returns its record.
    Raises :class:`CompactionRefused` for a range that is
    not closed or overlaps a finished compaction, and while another compaction of the group
    runs. Runs on the calling thread.
    """
    if first > last or first < 0:
        raise CompactionRefused(f"not a range of batch ids: {first}..{last}")
    root = local_root(sink.path)
    with compaction_slot(zookeeper, group, sink.path, first, last) as slot:
        return _compact(spark, sink, root, first, last, zookeeper, group, max_records_per_file, slot)


def _compact(
    spark: SparkSession,
    sink: SinkLayout,
    root: str,
    first: int,
    last: int,
    zookeeper: KazooClient,
    group: str,
    max_records_per_file: int | None,
    slot: CompactionSlot,
) -> CompactionRecord | None:
    for unfinished in journals(root, finished=False):
        slot.check(f"repairing {unfinished}")
        repair(root, unfinished)
    check_closed(zookeeper, group, first, last)
    for record in read_records(sink.path):
        if (record.first, record.last) == (first, last):
            return record  # done already (perhaps by the repair above): nothing more to do
        if record.first <= last and first <= record.last:
            raise CompactionRefused(
                f"micro-batches {record.first}..{record.last} of {sink.path} are compacted already; "
                f"{first}..{last} overlaps them\n  fix: compact a range outside the compacted ones"
            )
    sources = _sources(root, sink, first, last)
    if not sources:
        log.info("compaction of %s, micro-batches %d..%d: no files, nothing to do", sink.path, first, last)
        return None
    # Spark would take one file's schema for all: a column added within the range would be
    # lost when the sources are removed. Footers only, before anything is written.
    source_rows = _check_one_schema(root, sink, first, last, sources)
    journal = os.path.join(root, JOURNAL_DIR, f"{first}-{last}")
    os.makedirs(journal)
    write_json(journal, "plan.json", {"first": first, "last": last, "sources": sources})
    staged = os.path.join(journal, "staged")
    rows = _stage(spark, root, sink, sources, staged, max_records_per_file)
    if rows != source_rows:
        slot.check("deleting its journal")  # after an expiry, another may be compacting the same range
        shutil.rmtree(journal, ignore_errors=True)
        raise SinkError(
            f"compaction of {sink.path}, micro-batches {first}..{last}: {rows} rows staged but the sources hold "
            f"{source_rows}; nothing was changed\n  fix: check spark.sql.files.ignoreCorruptFiles / "
            "ignoreMissingFiles and the files of the range"
        )
    moves = [
        [rel, _target(sink, first, last, rel, n)] for n, rel in enumerate(_files_below(staged, suffix=".parquet"))
    ]
    slot.check("switching the files")
    write_json(journal, "moves.json", {"moves": moves, "rows": rows})
    return roll_forward(root, journal)


# -- steps --------------------------------------------------------------------------------------


def _check_one_schema(root: str, sink: SinkLayout, first: int, last: int, sources: list[str]) -> int:
    """The rows of ``sources`` by their footers; raises CompactionRefused when their schemas differ."""
    import pyarrow.parquet as pq

    rows = 0
    schema = None
    for rel in sources:
        meta = pq.read_metadata(os.path.join(root, rel))
        rows += meta.num_rows
        here = meta.schema.to_arrow_schema().remove_metadata()
        if schema is None:
            schema, where = here, rel
        elif not here.equals(schema):
            raise CompactionRefused(
                f"micro-batches {first}..{last} of {sink.path} do not share one schema ({where} and {rel} differ); "
                "compacting them would drop the columns of one\n  fix: compact the ranges before and after "
                "the schema change separately"
            )
    return rows


def _stage(
    spark: SparkSession, root: str, sink: SinkLayout, sources: list[str], staged: str, max_records: int | None
) -> int:
    """Spark writes the rows of ``sources`` under ``staged``, one directory per slice without
    the batch level, every column kept as data; returns the row count."""
    from pyspark.sql import functions as F

    df = spark.read.option("basePath", root).parquet(*(os.path.join(root, rel) for rel in sources))
    df = df.withColumn("topic", F.col("topic").cast("string"))
    df = df.withColumn("batch_id", F.col("batch_id").cast("long"))
    dirs = [*sink.partition_by, "topic", "partition"]
    for column in dirs:
        # The directory's own text, not the value Spark inferred from it: "hour=07" must stay
        # "hour=07", not become "hour=7". file_path is a URI (its segments percent-encoded once
        # more) and Spark escapes the copy again when it writes it: _target undoes both.
        pattern = "/" + re.escape(column) + "=([^/]*)/"
        df = df.withColumn(f"{_COPY}{column}", F.regexp_extract(F.col("_metadata.file_path"), pattern, 1))
    copies = [f"{_COPY}{c}" for c in dirs]
    df = df.repartition(*(F.col(c) for c in copies)).sortWithinPartitions(*copies, "batch_id")
    writer = df.write.mode(REFUSE_EXISTING)
    if max_records is not None:
        writer = writer.option("maxRecordsPerFile", str(int(max_records)))
    for key, value in sink.options.items():
        writer = writer.option(key, value)
    writer.partitionBy(*copies).parquet(staged)
    return int(spark.read.parquet(staged).count())


# -- files --------------------------------------------------------------------------------------


def _sources(root: str, sink: SinkLayout, first: int, last: int) -> list[str]:
    """Relative paths of the ``part-*`` files of the slice directories of batches first..last."""
    from jetkafka.spark._publish import LocalFiles

    depth = len(sink.partition_by) + len(SLICE_LEVELS)
    out: list[str] = []
    for leaf in LocalFiles().leaves(root, depth):
        level = leaf.split(os.sep)[len(sink.partition_by)]
        batch = level[len("batch_id="):] if level.startswith("batch_id=") else ""
        if not batch.isdigit() or not first <= int(batch) <= last:
            continue
        for name in sorted(os.listdir(os.path.join(root, leaf))):
            if name.startswith(SOURCE_PREFIX):
                out.append(os.path.join(leaf, name))
    return out


def _files_below(base: str, *, suffix: str) -> list[str]:
    out: list[str] = []
    for here, dirs, names in os.walk(base):
        dirs.sort()
        out.extend(os.path.relpath(os.path.join(here, n), base) for n in sorted(names) if n.endswith(suffix))
    return out


def _target(sink: SinkLayout, first: int, last: int, staged_rel: str, n: int) -> str:
    """``<copy>=<v>/.../part-...`` under staging -> the slice directory under batch ``first``."""
    levels = []
    for level in staged_rel.split(os.sep)[:-1]:
        name, _, value = level[len(_COPY):].partition("=")
        levels.append(f"{name}={unquote(unquote(value))}")  # Spark's escaping, then the URI's
    partition_levels = levels[: len(sink.partition_by)]
    slice_levels = levels[len(sink.partition_by):]
    name = f"{COMPACTED_PREFIX}{first}-{last}-{n:05d}-{uuid.uuid4().hex[:8]}.parquet"
    return os.path.join(*partition_levels, f"batch_id={first}", *slice_levels, name)

"""ParquetSink publishes each (batch_id, topic, partition) slice once and never replaces it:
a later run of the same slice (a retry, a replay, a stale writer) finds it published and keeps
it; staging is invisible to readers until a slice is published.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from jetkafka.spark import ParquetSink
from jetkafka.spark._publish import REFUSE_EXISTING, HadoopFiles
from tests.spark.helpers import read_ids


def rows(spark: Any, data: list[tuple[str, int, str, int]]) -> Any:
    return spark.createDataFrame(data, "topic STRING, partition INT, day STRING, n INT")


def content(sink: ParquetSink, spark: Any) -> list[tuple[int, str, int, str, int]]:
    df = sink.read(spark)
    return sorted((r["batch_id"], r["topic"], r["partition"], r["day"], r["n"]) for r in df.collect())


def leaf_files(leaf: Path) -> list[str]:
    return sorted(n for n in os.listdir(leaf) if n.endswith(".parquet"))


def test_a_replayed_slice_touches_nothing_else(spark: Any, tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path / "out"), partition_by="day")
    sink(rows(spark, [("t", 0, "d1", 1), ("t", 0, "d2", 2), ("t", 1, "d1", 3)]), 7)
    sink(rows(spark, [("t", 0, "d1", 9)]), 8)
    # Batch 7 runs again for partition 0 alone (its new owner's replay), with the same rows.
    again = sink.write(rows(spark, [("t", 0, "d1", 1), ("t", 0, "d2", 2)]), 7)
    assert again.published == [] and len(again.existing) == 2
    assert content(sink, spark) == [
        (7, "t", 0, "d1", 1),
        (7, "t", 0, "d2", 2),
        (7, "t", 1, "d1", 3),
        (8, "t", 0, "d1", 9),
    ]
    assert (tmp_path / "out" / "day=d1" / "batch_id=7" / "topic=t" / "partition=1").is_dir()


def test_numeric_topic_names_read_back_as_strings(spark: Any, tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path / "out"))
    sink(spark.createDataFrame([("2024", 0, 5)], "topic STRING, partition INT, n INT"), 1)
    assert sink.read(spark).collect()[0]["topic"] == "2024"


def test_slice_columns_are_required(spark: Any, tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path / "out"))
    with pytest.raises(ValueError, match="no column partition"):
        sink(spark.createDataFrame([("t", 1)], "topic STRING, n INT"), 1)
    with pytest.raises(ValueError, match="already has a batch_id"):
        sink(spark.createDataFrame([("t", 0, 1)], "topic STRING, partition INT, batch_id INT"), 1)
    with pytest.raises(ValueError, match="repeats the slice columns"):
        ParquetSink(str(tmp_path / "x"), partition_by=["partition"])
    with pytest.raises(ValueError, match="not in the DataFrame"):
        ParquetSink(str(tmp_path / "y"), partition_by="day")(
            spark.createDataFrame([("t", 0)], "topic STRING, partition INT"), 1
        )


def test_a_stale_writer_cannot_replace_a_published_slice(spark: Any, tmp_path: Path) -> None:
    """A second run of a slice (here with other rows, so a replacement would show) finds the
    first publication in place and leaves it byte for byte: a stale writer cannot delete it."""
    out = tmp_path / "out"
    sink = ParquetSink(str(out))
    sink(rows(spark, [("t", 0, "d1", 1), ("t", 1, "d1", 2)]), 7)
    leaf = out / "batch_id=7" / "topic=t" / "partition=0"
    first = leaf_files(leaf)
    later = sink.write(rows(spark, [("t", 0, "d1", 99), ("t", 2, "d1", 3)]), 7)
    assert later.existing == ["batch_id=7/topic=t/partition=0"]
    assert later.published == ["batch_id=7/topic=t/partition=2"]
    assert leaf_files(leaf) == first
    assert content(sink, spark) == [(7, "t", 0, "d1", 1), (7, "t", 1, "d1", 2), (7, "t", 2, "d1", 3)]
    assert not any((out / "_jetkafka-staging").iterdir()), "staging left behind"


def test_staged_rows_are_invisible_until_published(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = ParquetSink(str(out))
    sink(spark.createDataFrame([("t", 0, "a")], "topic STRING, partition INT, id STRING"), 1)
    staged = sink.stage(spark.createDataFrame([("t", 1, "b")], "topic STRING, partition INT, id STRING"), 2)
    assert staged.leaves == ["batch_id=2/topic=t/partition=1"]
    # Neither Spark nor pyarrow readers descend into the staging directory.
    assert [r["id"] for r in sink.read(spark).collect()] == ["a"]
    assert read_ids(str(out)) == [("a", 1)]
    assert staged.publish().published == ["batch_id=2/topic=t/partition=1"]
    assert sorted(read_ids(str(out))) == [("a", 1), ("b", 2)]


def test_hadoop_rename_never_replaces_an_existing_slice(spark: Any, tmp_path: Path) -> None:
    """The route for HDFS and other Hadoop filesystems, run on file:// through the JVM."""
    root = f"file://{tmp_path}"
    files = HadoopFiles(spark, root)
    for name, body in (("a", "first"), ("b", "second")):
        staged = tmp_path / "_staging" / name / "batch_id=1" / "topic=t" / "partition=0"
        staged.mkdir(parents=True)
        (staged / "part-0.parquet").write_text(body)
    assert files.leaves(f"{root}/_staging/a", 3) == ["batch_id=1/topic=t/partition=0"]
    target = f"{root}/out/batch_id=1/topic=t/partition=0"
    assert files.publish(f"{root}/_staging/a/batch_id=1/topic=t/partition=0", target)
    assert not files.publish(f"{root}/_staging/b/batch_id=1/topic=t/partition=0", target)
    assert (tmp_path / "out" / "batch_id=1" / "topic=t" / "partition=0" / "part-0.parquet").read_text() == "first"
    files.remove_tree(f"{root}/_staging")
    assert not (tmp_path / "_staging").exists()


def test_data_files_count_what_readers_see(spark: Any, tmp_path: Path) -> None:
    """Both routes count data files and bytes below a root, skipping `_` and `.` names (_SUCCESS, .crc)."""
    from jetkafka.spark._publish import LocalFiles

    leaf = tmp_path / "_staging" / "b1" / "batch_id=1" / "topic=t" / "partition=0"
    leaf.mkdir(parents=True)
    (leaf / "part-0.parquet").write_bytes(b"x" * 100)
    (leaf / "part-1.parquet").write_bytes(b"y" * 20)
    (leaf / "_SUCCESS").write_bytes(b"")
    (leaf / ".part-0.parquet.crc").write_bytes(b"c" * 8)
    (tmp_path / "_staging" / "b1" / "_temporary").mkdir()
    (tmp_path / "_staging" / "b1" / "_temporary" / "part-9.parquet").write_bytes(b"z" * 50)
    staged = tmp_path / "_staging" / "b1"
    assert LocalFiles().data_files(str(staged)) == (2, 120)
    assert HadoopFiles(spark, f"file://{tmp_path}").data_files(f"file://{staged}") == (2, 120)


def test_publication_counts_its_files_for_the_fence(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = ParquetSink(str(out))
    df = spark.createDataFrame([("t", 0, "a"), ("t", 1, "b")], "topic STRING, partition INT, id STRING")

    class Noted:
        """A fence that vouches for both slices and keeps what the sink notes."""

        def __init__(self) -> None:
            self.tokens: dict[tuple[str, int], int] = {("t", 0): 1, ("t", 1): 1}
            self.output: tuple[int, int] | None = None

        @contextmanager
        def publishing(self, topic: str, partition: int) -> Iterator[bool]:
            yield True

        def note_output(self, files: int, nbytes: int) -> None:
            self.output = (files, nbytes)

    fence = Noted()
    result = sink.stage(df, 1).publish(fence)  # type: ignore[arg-type]
    on_disk = sorted(p for p in out.rglob("*.parquet"))
    assert result.files == len(on_disk) >= 2
    assert result.bytes == sum(p.stat().st_size for p in on_disk) > 0
    assert fence.output == (result.files, result.bytes)


def test_each_slice_directory_gets_one_file(spark: Any, tmp_path: Path) -> None:
    """Rows of one slice spread over many Spark tasks still land in one file per slice
    directory; with one_file_per_slice=False each task holding rows of a slice writes its own."""
    data = [("t", p, f"d{p % 2}", n) for n in range(40) for p in range(3)]
    spread = rows(spark, data).repartition(6)  # every slice's rows in several tasks
    out = tmp_path / "out"
    ParquetSink(str(out), partition_by="day").write(spread, 1)
    leaves = sorted(out.glob("day=*/batch_id=1/topic=t/partition=*"))
    assert len(leaves) == 3
    assert [len(leaf_files(leaf)) for leaf in leaves] == [1, 1, 1]
    per_task = tmp_path / "per-task"
    ParquetSink(str(per_task), partition_by="day", one_file_per_slice=False).write(spread, 1)
    assert sum(len(leaf_files(leaf)) for leaf in per_task.glob("day=*/batch_id=1/topic=t/partition=*")) > 3
    for sink in (ParquetSink(str(out)), ParquetSink(str(per_task))):
        assert sorted((r["partition"], r["n"]) for r in sink.read(spark).collect()) == sorted(
            (p, n) for _, p, _, n in data
        )


def test_max_records_per_file_cuts_a_big_slice(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = ParquetSink(str(out), max_records_per_file=10)
    sink.write(rows(spark, [("t", 0, "d", n) for n in range(35)]).repartition(4), 1)
    leaf = out / "batch_id=1" / "topic=t" / "partition=0"
    assert len(leaf_files(leaf)) == 4  # 35 rows, at most 10 a file
    assert sorted(r["n"] for r in sink.read(spark).collect()) == list(range(35))
    with pytest.raises(ValueError, match="max_records_per_file"):
        ParquetSink(str(tmp_path / "x"), max_records_per_file=0)


def test_the_stage_never_writes_into_a_directory_that_exists(spark: Any, tmp_path: Path) -> None:
    """The save mode of the stage (and of compaction's): Spark refuses a target that exists, so
    a staging directory is never written twice (over Spark Connect: tests/spark/test_connect.py)."""
    from pyspark.errors import AnalysisException

    df = spark.createDataFrame([("t", 0, "a")], "topic STRING, partition INT, id STRING")
    target = str(tmp_path / "staged")
    df.write.mode(REFUSE_EXISTING).parquet(target)
    with pytest.raises(AnalysisException, match="PATH_ALREADY_EXISTS"):
        df.write.mode(REFUSE_EXISTING).parquet(target)
    assert [r["id"] for r in spark.read.parquet(target).collect()] == ["a"]


def test_a_new_batch_id_compiles_no_new_code(spark: Any, tmp_path: Path) -> None:
    """The plan of a write is the same for every micro-batch: Spark compiles its code once. With
    the batch id a literal column, every micro-batch compiled the write's stage again (about
    0.1 s of the driver's time each, more on a loaded machine)."""
    compilations = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    sink = ParquetSink(str(tmp_path / "out"))

    def write(batch_id: int) -> None:
        rows = [("t", p, f"id-{batch_id}-{p}") for p in range(3)]
        sink(spark.createDataFrame(rows, "topic STRING, partition INT, id STRING"), batch_id)

    write(1)  # compiles what the write needs, once
    before = compilations.getCount()
    for batch_id in (2, 3, 4):
        write(batch_id)
    assert compilations.getCount() == before, "Spark generated and compiled code again for a new batch id"
    assert sorted(r["batch_id"] for r in sink.read(spark).collect()) == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]

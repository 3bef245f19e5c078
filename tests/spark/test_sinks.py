"""ParquetSink replaces exactly the (batch_id, topic, partition) slices a write covers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jetkafka.spark import ParquetSink


def rows(spark: Any, data: list[tuple[str, int, str, int]]) -> Any:
    return spark.createDataFrame(data, "topic STRING, partition INT, day STRING, n INT")


def content(sink: ParquetSink, spark: Any) -> list[tuple[int, str, int, str, int]]:
    df = sink.read(spark)
    return sorted((r["batch_id"], r["topic"], r["partition"], r["day"], r["n"]) for r in df.collect())


def test_a_replayed_slice_replaces_only_itself(spark: Any, tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path / "out"), partition_by="day")
    sink(rows(spark, [("t", 0, "d1", 1), ("t", 0, "d2", 2), ("t", 1, "d1", 3)]), 7)
    sink(rows(spark, [("t", 0, "d1", 9)]), 8)
    # Batch 7 runs again for partition 0 alone (its new owner's replay), with the same rows.
    sink(rows(spark, [("t", 0, "d1", 1), ("t", 0, "d2", 2)]), 7)
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

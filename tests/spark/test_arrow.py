"""Kafka messages to Arrow to a Spark DataFrame: columns, nulls, headers and value formats."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message

from jetkafka.spark._arrow import (
    EVENT_SCHEMA,
    messages_to_arrow,
    parse_schema,
    to_dataframe,
    to_dataframe_row_by_row,
    to_table,
)

UTC = dt.UTC


def message(
    offset: int,
    value: bytes | None,
    *,
    key: bytes | None = b"k",
    headers: Any = None,
    ts: int | None = 1_700_000_000_000,
) -> Message:
    return Message(
        topic="orders", partition=3, offset=offset, key=key, value=value, headers=headers,
        timestamp=(1, ts) if ts is not None else (0, -1),
    )


MESSAGES = [
    message(10, b'{"id": "a", "n": 1}'),
    message(11, b'{"id": "b", "n": 2}', key=None, headers=[("trace", b"t1"), ("v", b"")]),
    message(12, b"not json", ts=None),
    message(13, None),
]


def test_messages_become_one_record_batch() -> None:
    batch = messages_to_arrow(MESSAGES)
    assert batch.schema == EVENT_SCHEMA
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [10, 11, 12, 13]
    assert {r["topic"] for r in rows} == {"orders"} and {r["partition"] for r in rows} == {3}
    assert rows[0]["timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert rows[2]["timestamp"] is None
    assert rows[1]["key"] is None and rows[3]["value"] is None
    assert rows[0]["headers"] is None
    assert rows[1]["headers"] == [{"key": "trace", "value": b"t1"}, {"key": "v", "value": b""}]
    assert messages_to_arrow([]).num_rows == 0


def test_value_format_options_are_checked() -> None:
    assert parse_schema(None, "binary") is None
    assert parse_schema("id STRING", "json") == "id STRING"
    with pytest.raises(ValueError, match="value_format json needs a schema"):
        parse_schema(None, "json")
    with pytest.raises(ValueError, match="only used with value_format json"):
        parse_schema("id STRING", "text")
    with pytest.raises(ValueError, match="must be one of binary, text, json"):
        parse_schema(None, "avro")


def test_dataframe_from_arrow(spark: Any) -> None:
    table = to_table([messages_to_arrow(MESSAGES[:2]), messages_to_arrow(MESSAGES[2:])])
    df = to_dataframe(spark, table)
    assert df.columns == ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
    assert df.schema["value"].dataType.typeName() == "binary"
    rows = df.orderBy("offset").collect()
    assert [bytes(r["value"]) if r["value"] is not None else None for r in rows] == [m.value() for m in MESSAGES]
    assert rows[1]["headers"][0]["key"] == "trace"

    text = to_dataframe(spark, table, "text").orderBy("offset").collect()
    assert [r["value"] for r in text] == ['{"id": "a", "n": 1}', '{"id": "b", "n": 2}', "not json", None]

    parsed = to_dataframe(spark, table, "json", "id STRING, n INT").orderBy("offset")
    assert parsed.schema["value"].dataType.simpleString() == "struct<id:string,n:int>"
    values = [r["value"] for r in parsed.collect()]
    assert (values[0]["id"], values[0]["n"]) == ("a", 1)
    assert (values[1]["id"], values[1]["n"]) == ("b", 2)
    assert values[2] is None or values[2]["id"] is None  # malformed: null, never an error
    assert values[3] is None


def test_row_by_row_baseline_builds_the_same_dataframe(spark: Any) -> None:
    fast = to_dataframe(spark, to_table([messages_to_arrow(MESSAGES)]))
    slow = to_dataframe_row_by_row(spark, MESSAGES)
    assert slow.schema.simpleString() == fast.schema.simpleString()
    assert sorted(map(tuple, slow.collect())) == sorted(map(tuple, fast.collect()))


def test_empty_table_keeps_the_schema(spark: Any) -> None:
    df = to_dataframe(spark, pa.Table.from_batches([], schema=EVENT_SCHEMA))
    assert df.count() == 0
    assert "headers" in df.columns

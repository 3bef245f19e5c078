"""Kafka messages to Arrow, and Arrow to a Spark DataFrame.

A worker's batch of librdkafka messages becomes one :class:`pyarrow.RecordBatch` right away:
the message objects (and the librdkafka buffers they pin) are released at once, and a
micro-batch is a list of compact Arrow batches that Spark reads without a per-row Python step.

The columns follow Spark's own Kafka source: ``topic`` string, ``partition`` int,
``offset`` long, ``timestamp`` timestamp (null when the broker gave none), ``key`` and ``value``
binary, ``headers`` array<struct<key string, value binary>> (null when the record has none).
With ``value_format`` ``text`` the value becomes a string; with ``json`` it becomes a struct
parsed with the user's schema exactly as Spark's ``from_json`` parses it (a malformed value
gives null fields, never an error): by Arrow in bulk when that gives the same result, else by
Spark (:mod:`jetkafka.spark._json_values`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jetkafka.spark._schema_ddl import check_ddl

if TYPE_CHECKING:
    from confluent_kafka import Message
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

VALUE_FORMATS = ("binary", "text", "json")

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

EVENT_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS_TYPE),
    ]
)

# librdkafka's TIMESTAMP_NOT_AVAILABLE
_NO_TIMESTAMP = 0


def messages_to_arrow(messages: Sequence[Message]) -> pa.RecordBatch:
    """One partition's messages (in offset order) as a record batch of :data:`EVENT_SCHEMA`."""
    n = len(messages)
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=EVENT_SCHEMA)
    first = messages[0]
    offsets = [m.offset() for m in messages]
    stamps = [m.timestamp() for m in messages]
    timestamps = [ts if kind != _NO_TIMESTAMP else None for kind, ts in stamps]
    keys = [m.key() for m in messages]
    values = [m.value() for m in messages]
    raw_headers = [m.headers() for m in messages]
    if any(raw_headers):
        headers = pa.array(raw_headers, type=HEADERS_TYPE)
    else:
        # The common case: no record carries headers, so skip building empty structs.
        headers = pa.nulls(n, HEADERS_TYPE)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([first.topic()] * n, pa.string()),
            pa.array([first.partition()] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.timestamp("ms", tz="UTC")),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            headers,
        ],
        schema=EVENT_SCHEMA,
    )


def to_table(batches: Sequence[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(list(batches), schema=EVENT_SCHEMA)


def parse_schema(schema: str | StructType | None, value_format: str) -> Any:
    """Check the ``schema`` / ``value_format`` pair; returns the schema to hand to ``from_json``.

    A DDL string is checked without Spark (:mod:`jetkafka.spark._schema_ddl`): a schema Spark
    would refuse raises :class:`~jetkafka.spark._schema_ddl.SchemaError` (a ``ValueError``)."""
    if value_format not in VALUE_FORMATS:
        raise ValueError(f"value_format must be one of {', '.join(VALUE_FORMATS)}, got {value_format!r}")
    if value_format == "json":
        if schema is None or (isinstance(schema, str) and not schema.strip()):
            raise ValueError(
                "value_format json needs a schema: a DDL string such as "
                "'user STRING, amount DOUBLE, ts TIMESTAMP', or a pyspark StructType"
            )
        if isinstance(schema, str):
            check_ddl(schema)
        return schema
    if schema is not None:
        raise ValueError(f"schema is only used with value_format json, not {value_format}")
    return None


def to_dataframe(
    spark: SparkSession, table: pa.Table, value_format: str = "binary", schema: Any = None
) -> DataFrame:
    """The micro-batch's DataFrame, built from Arrow in one transfer (no per-row Python work)."""
    from pyspark.sql import functions as F

    if table.num_rows == 0:
        # PySpark cannot type a column without chunks; an empty slice (a replay whose events
        # are gone from the log) must still give an empty DataFrame.
        table = pa.Table.from_batches([pa.RecordBatch.from_pylist([], schema=table.schema)])
    else:
        # Spark makes one task per Arrow chunk: hundreds of worker-sized chunks would cost more
        # in task overhead than the copy that merges them (re-cut at arrow.maxRecordsPerBatch).
        table = _unsliced(table.combine_chunks())
    if value_format == "json":
        parsed = _parsed_by_arrow(spark, table, schema)
        if parsed is not None:
            return spark.createDataFrame(parsed)
    df = spark.createDataFrame(table)
    if value_format == "text":
        df = df.withColumn("value", F.col("value").cast("string"))
    elif value_format == "json":
        df = df.withColumn("value", F.from_json(F.col("value").cast("string"), schema))
    return df


def _unsliced(table: pa.Table) -> pa.Table:
    """``table`` with every column starting at offset 0 of its buffers.

    A micro-batch made of one worker batch cut at ``max_events`` is a slice of it, and
    ``combine_chunks`` leaves a single chunk as it is. Spark Connect's client rebuilds list
    columns (the headers) from their offsets and validity bitmap, which pyarrow refuses for a
    slice ("Null bitmap with offsets slice not supported"): every run of that micro-batch would
    fail. Only the sliced columns are copied.
    """
    columns = [
        pa.chunked_array([pa.concat_arrays(column.chunks)], column.type)
        if column.num_chunks == 1 and column.chunk(0).offset != 0
        else column
        for column in table.columns
    ]
    return pa.Table.from_arrays(columns, schema=table.schema)


def _parsed_by_arrow(spark: SparkSession, table: pa.Table, schema: Any) -> pa.Table | None:
    """``table`` with its values parsed into the schema's struct by Arrow, or None when only
    Spark's ``from_json`` gives the right result (see :mod:`jetkafka.spark._json_values`)."""
    from pyspark.sql.types import StructType

    from jetkafka.spark._json_values import arrow_struct_type, parse_json_values

    if isinstance(schema, str):
        schema = StructType.fromDDL(schema)
    struct = arrow_struct_type(schema)
    if struct is None:
        return None
    index = table.schema.get_field_index("value")
    values = parse_json_values(table.column(index), struct)
    if values is None:
        return None
    return table.set_column(index, pa.field("value", struct), values)


def to_dataframe_row_by_row(spark: SparkSession, messages: Sequence[Message]) -> DataFrame:
    """The same DataFrame built from Python rows: the slow path, kept as the benchmark's baseline."""
    import datetime as dt

    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    spark_schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField(
                "headers",
                ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
            ),
        ]
    )
    utc = dt.UTC
    rows = []
    for m in messages:
        kind, ts = m.timestamp()
        rows.append(
            (
                m.topic(),
                m.partition(),
                m.offset(),
                None if kind == _NO_TIMESTAMP else dt.datetime.fromtimestamp(ts / 1000, utc),
                m.key(),
                m.value(),
                m.headers(),
            )
        )
    return spark.createDataFrame(rows, spark_schema)

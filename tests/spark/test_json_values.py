"""JSON values parsed by Arrow must equal Spark's from_json, value for value, or be left to Spark."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from jetkafka.spark._arrow import EVENT_SCHEMA, to_dataframe
from jetkafka.spark._json_values import arrow_struct_type, parse_json_values

DDL = "id STRING, n BIGINT, i INT, sm SMALLINT, t TINYINT, d DOUBLE, b BOOLEAN, s STRUCT<x: INT, y: STRING>"

# Values both parsers take alike.
AGREED = [
    b'{"id":"a","n":1,"i":2,"sm":3,"t":4,"d":1.5,"b":true,"s":{"x":1,"y":"z"}}',
    None,
    b"",
    b"{}",
    b"{ }",
    b'{"id":null,"s":null}',
    b'{"ID":"names match case-sensitively"}',
    b'{"id":"\\u00e9\\ud83d\\ude00 a\\/b"}',
    '{"id":"raw ü"}'.encode(),
    b'{"d":1}',
    b'{"d":1e3,"n":-9223372036854775808}',
    b'{"d":-0.0}',
    b'{"s":{}}',
    b'{"s":{"x":1,"extra":2}}',
    b'{"extra":{"deep":[1,{"a":null}]},"id":"k"}',
    b'{"i":2147483647,"t":-128}',
]

# Values Arrow cannot parse as Spark does: each must send its micro-batch to Spark.
DISAGREED = [
    b"null",
    b"[1]",
    b"42",
    b'"text"',
    b"  ",
    b'{"id":"a"} ',
    b'{}{}',
    b'{"id":\n"a"}',
    b"not json",
    b'{"id":"a",}',
    b'{"id":123}',
    b'{"id":{"k":1}}',
    b'{"n":1.5}',
    b'{"n":"7"}',
    b'{"n":99999999999999999999}',
    b'{"i":2147483648}',
    b'{"t":200}',
    b'{"d":1e400}',
    b'{"b":"true"}',
    b'{"s":5}',
    b'{"id":"\\ud800"}',
    b'{"id":"tab\there"}',
    b'{"id":"a","id":"b"}',
    b"\xff\xfe",
    b'{"id":"\xc3("}',  # invalid UTF-8 inside a string, which Arrow's reader alone would keep
]


def _from_json(spark: Any, values: list[bytes | None]) -> list[Any]:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(pa.table({"i": list(range(len(values))), "value": pa.array(values, pa.binary())}))
    rows = df.select("i", F.from_json(F.col("value").cast("string"), DDL).alias("v")).orderBy("i").collect()
    return [None if r["v"] is None else r["v"].asDict(recursive=True) for r in rows]


def _struct(spark: Any) -> pa.StructType:
    from pyspark.sql.types import StructType

    struct = arrow_struct_type(StructType.fromDDL(DDL))
    assert struct is not None
    return struct


def test_arrow_parses_exactly_as_from_json(spark: Any) -> None:
    parsed = parse_json_values(pa.array(AGREED, pa.binary()), _struct(spark))
    assert parsed is not None
    assert parsed.to_pylist() == _from_json(spark, AGREED)


@pytest.mark.parametrize("value", DISAGREED, ids=repr)
def test_values_parsed_otherwise_are_left_to_spark(spark: Any, value: bytes) -> None:
    # Among agreed values, one such value sends the whole micro-batch to Spark.
    assert parse_json_values(pa.array([*AGREED, value], pa.binary()), _struct(spark)) is None


def test_dataframe_is_the_same_either_way(spark: Any) -> None:
    """to_dataframe's result for a micro-batch with and without a value Arrow refuses."""

    def table(values: list[bytes | None]) -> pa.Table:
        n = len(values)
        return pa.table(
            {
                "topic": ["t"] * n,
                "partition": pa.array([0] * n, pa.int32()),
                "offset": pa.array(range(n), pa.int64()),
                "timestamp": pa.array([None] * n, pa.timestamp("ms", tz="UTC")),
                "key": pa.array([None] * n, pa.binary()),
                "value": pa.array(values, pa.binary()),
                "headers": pa.nulls(n, EVENT_SCHEMA.field("headers").type),
            },
            schema=EVENT_SCHEMA,
        )

    fast = to_dataframe(spark, table(AGREED), "json", DDL)
    slow = to_dataframe(spark, table([*AGREED, b"not json"]), "json", DDL)
    assert fast.schema == slow.schema
    fast_rows = [r.asDict(recursive=True) for r in fast.orderBy("offset").collect()]
    slow_rows = [r.asDict(recursive=True) for r in slow.orderBy("offset").collect()][: len(AGREED)]
    assert fast_rows == slow_rows


def test_schemas_with_other_conversions_are_left_to_spark(spark: Any) -> None:
    from pyspark.sql.types import StructType

    for ddl in ("ts TIMESTAMP", "d DATE", "m DECIMAL(10,2)", "f FLOAT", "a ARRAY<INT>", "m MAP<STRING,INT>",
                "s STRUCT<t: TIMESTAMP>"):
        assert arrow_struct_type(StructType.fromDDL(ddl)) is None, ddl
    assert arrow_struct_type("id STRING") is None  # a DDL string is converted by the caller


def test_mutated_values_parse_alike_or_go_to_spark(spark: Any) -> None:
    """Thousands of values mutated at random (seeded): each one Arrow accepts equals from_json."""
    import random

    rng = random.Random(21)
    alphabet = b'{}[]":,\\\ntrue0123456789.-eE null\x00\xff\xc3abc/u'
    accepted: list[tuple[bytes, Any]] = []
    struct = _struct(spark)
    for _ in range(4_000):
        value = bytearray(rng.choice([v for v in AGREED if v]))
        for _ in range(rng.randint(0, 4)):
            pos = rng.randrange(len(value) + 1)
            roll = rng.random()
            if roll < 0.4:
                value[pos:pos] = bytes([rng.choice(alphabet)])
            elif roll < 0.7 and len(value) > 2:
                del value[min(pos, len(value) - 1)]
            else:
                value[pos:pos] = rng.choice([v for v in AGREED if v])
        parsed = parse_json_values(pa.array([bytes(value)], pa.binary()), struct)
        if parsed is not None:
            accepted.append((bytes(value), parsed.to_pylist()[0]))
    assert len(accepted) > 200  # the route is exercised, not only refused
    expected = _from_json(spark, [v for v, _ in accepted])
    assert [got for _, got in accepted] == expected

"""A JSON ``schema`` Spark cannot read stops ``jetkafka validate`` and ``jetkafka run`` with one
message naming the field, the type and the fix, status 2, before Spark starts; the check
without Spark agrees with Spark's own parser; what only Spark refuses stops the start."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from jetkafka.channel import InboundChannel
from jetkafka.coordination import GroupPaths
from jetkafka.spark import SchemaError, SparkMicroBatchProcessor
from jetkafka.spark._schema_ddl import check_ddl
from tests.support.channels import channel_config
from tests.support.processes import REPO

BOTH_ACCEPT = [
    "order_id BIGINT, user STRING",
    "a boolean, b tinyint, c byte, d smallint, e short, f int, g integer, h bigint, i long",
    "a float, b real, c double, d date, e timestamp, f timestamp_ntz, g timestamp_ltz",
    "a string, b binary, c void, d variant, e time, f time(3), g interval",
    "a decimal, b decimal(10), c dec(5,1), d numeric(38,38), e decimal( 10 , 2 ), f decimal(0)",
    "a char(5), b varchar(0), c character(5)",
    "a interval year to month, b interval day to second, c interval hour, d INTERVAL MINUTE TO SECOND",
    "a string collate UTF8_LCASE, b STRING COLLATE `UNICODE_CI`",
    "a array<int>, b map<string, array<struct<c: decimal(3,1)>>>, c struct<>, d ARRAY< INT >",
    "a struct<x:int, y string, `z w`: int not null, v int comment 'it''s'>",
    "a: int, b: string",
    "a int not null comment 'x', b string comment \"y\"",
    "`a b` int, `c``d` string, 1a int, _a int, select int, int int",
    "a int -- a comment\n, b /* another */ string",
    "a geometry(4326), b geography(4326)",
    "int",
    "map<string,int>",
    "array<int>",
    "struct<a:int>",
    " a int ",
]
BOTH_REFUSE = [
    "order_id BIGINTT, user STRING",
    "a bool",
    "a text",
    "a int64",
    "a `int`",
    "a double precision",
    "a timestamp with time zone",
    "a timestamp(3)",
    "a string(10)",
    "a binary(5)",
    "a char",
    "a varchar",
    "a char(5, 2)",
    "a decimal(40,2)",
    "a decimal(5,6)",
    "a decimal(10,2,3)",
    "a decimal()",
    "a numeric(5,-1)",
    "a interval day to month",
    "a interval second to second",
    "a interval years",
    "a geometry",
    "a array<bigintt>",
    "a array<int",
    "a array<int>>",
    "a map<int>",
    "a map<string,int",
    "a struct<a:int",
    "a struct<c, d string>",
    "a struct<c: int, >",
    "a array<int not null>",
    "a",
    "a int,",
    "a int, ,b int",
    "a int b",
    "a int default 5",
    "a int not",
    "a int null",
    "a int comment",
    "a int comment 'x' not null",
    "a int;",
    "a.b int",
    "a-b int",
    "é int",
    "123 int",
]
ONLY_SPARK_REFUSES = [
    "a string collate no_such_collation",
    "a geometry(EPSG:4326)",
]


def spark_accepts(ddl: str) -> bool:
    from pyspark.sql.types import StructType

    try:
        StructType.fromDDL(ddl)
    except Exception:  # noqa: BLE001 - any refusal of Spark's parser
        return False
    return True


def check_accepts(ddl: str) -> bool:
    try:
        check_ddl(ddl)
    except SchemaError:
        return False
    return True


@pytest.mark.parametrize("ddl", BOTH_ACCEPT + BOTH_REFUSE + ONLY_SPARK_REFUSES)
def test_the_check_without_spark_agrees_with_sparks_parser(spark: Any, ddl: str) -> None:
    """Never a refusal Spark would not make; every refusal listed in the module doc made."""
    expected = (ddl in BOTH_ACCEPT, ddl in BOTH_ACCEPT or ddl in ONLY_SPARK_REFUSES)
    assert (spark_accepts(ddl), check_accepts(ddl)) == expected


def config_with_schema(schema: str, zk_connect: str, bootstrap: str, spark: dict[str, Any]) -> dict[str, Any]:
    return {
        "zookeeper": {"connect": zk_connect},
        "kafka": {"bootstrap.servers": bootstrap},
        "channel": {"group": "g", "topics": ["orders"]},
        "processor": {
            "class": "jetkafka.spark:SparkMicroBatchProcessor",
            "options": {"fn": "examples.pipeline.aggregates:rollup", "value_format": "json", "schema": schema},
        },
        "spark": spark,
    }


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


FIRST_LINE = (
    "jetkafka: error: {path}:{line}: processor.options.schema: field order_id has type BIGINTT, which Spark does "
    "not know (did you mean BIGINT?)"
)
FIX_LINE = (
    "  fix: write BIGINT for order_id; Spark's types: BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, "
    "DECIMAL(p,s), STRING, CHAR(n), VARCHAR(n), BINARY, DATE, TIMESTAMP, TIMESTAMP_NTZ, ARRAY<T>, MAP<K,V>, "
    "STRUCT<name: T, ...>"
)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_bad_type_stops_validate_and_run_with_one_message(command: str, tmp_path: Path) -> None:
    """``run`` is pointed at a ZooKeeper and a Spark Connect server that do not answer: its
    message is the schema's, so it stopped before connecting to either, let alone starting Spark."""
    nowhere = f"127.0.0.1:{closed_port()}"
    path = tmp_path / "orders.yaml"
    config = config_with_schema("order_id BIGINTT, user STRING, cents BIGINT", nowhere, nowhere, {"remote": f"sc://{nowhere}"})
    path.write_text(yaml.safe_dump(config))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "jetkafka", command, str(path)],
        cwd=str(REPO), capture_output=True, text=True, timeout=60, check=False,
    )
    took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    line = path.read_text().splitlines().index(next(s for s in path.read_text().splitlines() if "schema:" in s)) + 1
    assert done.stderr.splitlines() == [FIRST_LINE.format(path=path, line=line), FIX_LINE], done.stderr
    assert done.stdout == ""
    assert took < 30, f"{command} took {took:.1f} s"


def test_a_schema_only_spark_refuses_stops_the_start_before_joining(
    spark: Any, zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any
) -> None:
    topic = topic_factory(partitions=1)
    schema = "id STRING COLLATE no_such_collation"
    processor = SparkMicroBatchProcessor(lambda df, batch_id: None, value_format="json", schema=schema, spark=spark)
    channel = InboundChannel.from_dict(channel_config(zk_connect, kafka_config, [topic]), processor=processor)
    with pytest.raises(SchemaError) as raised:
        channel.start()
    message = str(raised.value)
    assert message.startswith(f"processor.options.schema: Spark refuses {schema!r}: ")
    assert "no_such_collation".upper() in message.upper()
    assert "\n  fix: " in message and "Traceback" not in message
    assert not channel.running
    ids = GroupPaths("g").ids
    assert not zk.exists(ids) or zk.get_children(ids) == [], "the instance registered in its group"

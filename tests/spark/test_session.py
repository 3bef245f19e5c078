"""The Spark session built from the ``spark:`` section, and the processor's options."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from jetkafka.channel import InboundChannel
from jetkafka.config import parse_config
from jetkafka.config._schema import ProcessorConfig, SparkConfig
from jetkafka.coordination import GroupPaths
from jetkafka.errors import ProcessorError
from jetkafka.processors._loading import load_processor
from jetkafka.spark import SparkMicroBatchProcessor, SparkSessionError, resolve_function
from jetkafka.spark._session import builder_options, check_connect_server, quiet_log4j2_file
from tests.support.channels import channel_config

REPO = Path(__file__).resolve().parents[2]


def test_local_session_options() -> None:
    config = SparkConfig(app_name="minutes", driver_memory="3g", conf={"spark.sql.shuffle.partitions": 8})
    options = builder_options(config)
    assert options["spark.app.name"] == "minutes"
    assert options["spark.driver.memory"] == "3g"
    assert options["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert options["spark.ui.showConsoleProgress"] == "false"
    assert options["spark.sql.shuffle.partitions"] == "8"
    java_options = options["spark.driver.extraJavaOptions"]
    assert java_options == f"-Dlog4j2.configurationFile=file:{quiet_log4j2_file()}"
    assert "rootLogger.level = warn" in Path(quiet_log4j2_file()).read_text()


def test_spark_conf_wins_over_the_defaults() -> None:
    conf = {"spark.driver.memory": "2g", "spark.ui.showConsoleProgress": True, "spark.driver.extraJavaOptions": "-Dx=1"}
    options = builder_options(SparkConfig(conf=conf))
    assert options["spark.driver.memory"] == "2g"
    assert options["spark.ui.showConsoleProgress"] == "true"
    assert options["spark.driver.extraJavaOptions"] == "-Dx=1"


def test_remote_session_gets_no_local_driver_settings() -> None:
    options = builder_options(SparkConfig(remote="sc://spark:15002", conf={"spark.sql.shuffle.partitions": "4"}))
    assert options == {"spark.app.name": "jetkafka", "spark.sql.shuffle.partitions": "4"}


def test_connect_without_client_packages_names_the_fix(tmp_path: Path) -> None:
    """In a fresh interpreter where the client's gRPC package cannot be imported (as without the
    connect extra); fresh also because a Connect session must not meet this process's classic one.

    A script file, not ``python -c``: PySpark takes a main module without a file for its own
    doctest runner and exits early.
    """
    code = (
        "import sys\n"
        "sys.modules['grpc'] = None  # import grpc raises ImportError, as when it is not installed\n"
        "from jetkafka.config._schema import SparkConfig\n"
        "from jetkafka.spark._session import build_session, SparkSessionError\n"
        "try:\n"
        "    build_session(SparkConfig(remote='sc://127.0.0.1:1'))\n"
        "except SparkSessionError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    script = tmp_path / "connect.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert "ERROR spark.remote sc://127.0.0.1:1: the Spark Connect client is not installed" in out.stdout, out.stderr
    assert 'pip install "jetkafka[connect]"' in out.stdout


def test_processor_from_yaml_options() -> None:
    config = parse_config(
        {
            "zookeeper": {"connect": "z:2181"},
            "kafka": {"bootstrap.servers": "k:9092"},
            "channel": {"group": "g", "topics": ["t"]},
            "processor": {
                "class": "jetkafka.spark:SparkMicroBatchProcessor",
                "options": {
                    "fn": "examples.pipeline.aggregates:minute_writer",
                    "fn_options": {"path": "/tmp/out"},
                    "value_format": "json",
                    "schema": "id STRING",
                    "max_events": "5000",  # as substituted from the environment
                },
            },
        }
    )
    assert config.processor is not None
    processor = load_processor(config.processor)
    assert isinstance(processor, SparkMicroBatchProcessor)
    assert processor.bounds.max_events == 5000
    assert callable(processor.fn) and processor.fn.__name__ == "write_minutes"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fn": "examples.pipeline.aggregates:minute_writer", "fn_options": {"path": "x"}, "value_format": "json"},
         "value_format json needs a schema"),
        ({"fn": "examples.pipeline.aggregates:no_such"}, "has no attribute 'no_such'"),
        ({"fn": "examples.pipeline.aggregates"}, "not of the form 'package.module:function'"),
        ({"fn": "examples.pipeline.aggregates:MINUTE_MS"}, "must be callable"),
        ({"fn": "examples.pipeline.aggregates:rollup", "max_events": 0}, "max_events must be >= 1"),
    ],
)
def test_bad_processor_options_stop_the_load(options: dict[str, object], message: str) -> None:
    with pytest.raises(ProcessorError, match=message):
        load_processor(ProcessorConfig(class_path="jetkafka.spark:SparkMicroBatchProcessor", options=options))


def test_resolve_function_accepts_callables() -> None:
    def fn(df: object, batch_id: int) -> None:
        pass

    assert resolve_function(fn) is fn
    assert resolve_function("examples.pipeline.aggregates:rollup").__name__ == "rollup"


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_an_unreachable_connect_server_stops_the_start_before_joining(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, zk: KazooClient
) -> None:
    """spark.remote at a closed port: the start fails within seconds with one message naming
    spark.remote and the fix, and the instance never had a member node in ZooKeeper."""
    topic = topic_factory(partitions=2)
    remote = f"sc://127.0.0.1:{closed_port()}"
    config = {**channel_config(zk_connect, kafka_config, [topic]), "spark": {"remote": remote}}
    ids = GroupPaths("g").ids
    zk.ensure_path(ids)
    created_before = zk.exists(ids).cversion  # counts every child created (and deleted) under it
    channel = InboundChannel.from_dict(config, processor=SparkMicroBatchProcessor(lambda df, batch_id: None))
    started = time.monotonic()
    with pytest.raises(SparkSessionError) as raised:
        channel.start()
    assert time.monotonic() - started < 60
    message = str(raised.value)
    assert f"spark.remote {remote}: no Spark Connect server answers" in message
    assert "fix: start the Connect server" in message
    assert zk.get_children(ids) == []
    assert zk.exists(ids).cversion == created_before  # no member node was ever created
    assert not channel.running


def test_connect_check_rejects_what_is_not_a_connect_url() -> None:
    with pytest.raises(SparkSessionError, match="not a Spark Connect URL"):
        check_connect_server("http://spark:15002")

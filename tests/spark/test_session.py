"""The Spark session built from the ``spark:`` section, and the processor's options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jetkafka.config import parse_config
from jetkafka.config._schema import ProcessorConfig, SparkConfig
from jetkafka.errors import ProcessorError
from jetkafka.processors._loading import load_processor
from jetkafka.spark import SparkMicroBatchProcessor, resolve_function
from jetkafka.spark._session import builder_options, quiet_log4j2_file

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
    """In a fresh interpreter: a Connect session must not meet this process's classic one.

    A script file, not ``python -c``: PySpark takes a main module without a file for its own
    doctest runner and exits early.
    """
    code = (
        "from jetkafka.config._schema import SparkConfig\n"
        "from jetkafka.spark._session import build_session, SparkSessionError\n"
        "try:\n"
        "    build_session(SparkConfig(remote='sc://127.0.0.1:1'))\n"
        "except SparkSessionError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    try:
        import grpc  # noqa: F401

        pytest.skip("the Spark Connect client is installed here")
    except ImportError:
        pass
    script = tmp_path / "connect.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert "ERROR spark.remote sc://127.0.0.1:1: the Spark Connect client is not installed" in out.stdout, out.stderr
    assert 'pip install "pyspark[connect]"' in out.stdout


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

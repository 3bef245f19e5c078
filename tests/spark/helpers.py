"""What the Spark tests share with the child processes they start (``fn`` given by name in YAML)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from jetkafka.spark.session import quiet_log4j2_file
from jetkafka.spark.sinks import ParquetSink

TEST_SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    # Short-lived test drivers on a small machine: the quick JIT tier starts Spark in about
    # half the time, and tiny batches never need the optimizing one.
    "spark.driver.extraJavaOptions": (
        f"-Dlog4j2.configurationFile=file:{quiet_log4j2_file()} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    ),
}


def spark_section(master: str = "local[1]") -> dict[str, Any]:
    """The ``spark:`` section of a child process's configuration."""
    return {"master": master, "driver_memory": "1g", "conf": dict(TEST_SPARK_CONF)}


def event_ids(df: Any) -> Any:
    """One row per event: where it came from and its id (value_format json)."""
    from pyspark.sql import functions as F

    return df.select("topic", "partition", "offset", F.col("value.id").alias("id"))


def read_ids(path: str) -> list[tuple[str, int]]:
    """``(id, batch_id)`` of every row :func:`id_writer` wrote, read with pyarrow (no Spark job)."""
    import pyarrow.dataset as ds

    table = ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=["id", "batch_id"])
    return list(zip(table.column("id").to_pylist(), table.column("batch_id").to_pylist()))


def id_writer(path: str) -> Callable[[Any, int], None]:
    """``fn`` writing every event's id to Parquet at ``path``."""
    sink = ParquetSink(path)

    def fn(df: Any, batch_id: int) -> None:
        sink.write(event_ids(df), batch_id)

    return fn


def stall_after_write(path: str, signal_file: str) -> Callable[[Any, int], None]:
    """Like :func:`id_writer`, but after its first write (first across processes, as long as
    ``signal_file`` exists) it writes the batch id to ``signal_file`` and stalls: the test
    kills the process there, after the output is written and before the offsets are committed.
    """
    write = id_writer(path)

    def fn(df: Any, batch_id: int) -> None:
        write(df, batch_id)
        marker = Path(signal_file)
        if not marker.exists():
            tmp = marker.with_name(marker.name + ".tmp")
            tmp.write_text(f"{batch_id} {os.getpid()}\n")
            tmp.rename(marker)
            while True:
                time.sleep(1)

    return fn


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.spark.helpers CONFIG --go FILE``: an instance whose Spark driver starts
    (and runs a first job) at once, and whose channel starts when ``FILE`` appears. A test can
    so have a replacement instance ready while the instance it replaces is still running.
    SIGTERM shuts the channel down gracefully (exit 0).
    """
    from jetkafka.channel import InboundChannel
    from jetkafka.config import load_config
    from jetkafka.spark.session import build_session

    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--go", required=True)
    args = parser.parse_args(argv)
    config = load_config(args.config)
    logging.basicConfig(
        level=config.logging.level, format="%(asctime)s %(levelname)-7s %(name)s [%(threadName)s] %(message)s"
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = build_session(config.spark)
    spark.range(100).selectExpr("sum(id)").collect()
    while not Path(args.go).exists():
        if stop.wait(0.1):
            return 0
    channel = InboundChannel(config)
    channel.start()
    while not stop.wait(0.2):
        pass
    clean = channel.shutdown()
    spark.stop()
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the Spark tests share with the child processes they start (``fn`` given by name in YAML)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jetkafka.spark._session import quiet_log4j2_file
from jetkafka.spark._sinks import ParquetSink

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
    return list(zip(table.column("id").to_pylist(), table.column("batch_id").to_pylist(), strict=True))


def id_writer(path: str) -> Callable[..., None]:
    """``fn`` writing every event's id to Parquet at ``path`` (fenced when given a fence)."""
    sink = ParquetSink(path)

    def fn(df: Any, batch_id: int, fence: Any = None) -> None:
        sink.write(event_ids(df), batch_id, *fenced(fence))

    return fn


def fenced(fence: Any) -> tuple[Any, ...]:
    """The fence argument for ``ParquetSink.write``, left out when there is none (so the tests
    also run against a sink that takes ``(df, batch_id)`` only)."""
    return () if fence is None else (fence,)


def published(result: Any) -> list[str]:
    """Leaves a ``ParquetSink.write`` published; ``["?"]`` when the sink does not say (it wrote)."""
    return ["?"] if result is None else list(result.published)


def audited_writer(path: str, audit: str, signal_file: str, pause_s: float) -> Callable[..., None]:
    """Like :func:`id_writer`, appending one JSON line per call to ``audit``: the pid, batch id,
    time, and the slices published (each with its fencing token), kept or refused. The first
    call across processes (while ``signal_file`` does not exist) writes its batch id there and
    sleeps ``pause_s`` before writing, so a test can freeze the process inside ``fn``.
    """
    sink = ParquetSink(path)

    def fn(df: Any, batch_id: int, fence: Any = None) -> None:
        marker = Path(signal_file)
        if not marker.exists():
            tmp = marker.with_name(marker.name + ".tmp")
            tmp.write_text(f"{batch_id} {os.getpid()}\n")
            tmp.rename(marker)
            time.sleep(pause_s)
        tokens = {f"{t}/{p}": tok for (t, p), tok in fence.tokens.items()} if fence is not None else {}
        entry: dict[str, Any] = {"pid": os.getpid(), "batch_id": batch_id, "tokens": tokens}
        try:
            result = sink.write(event_ids(df), batch_id, *fenced(fence))
        except Exception as exc:
            entry.update(at=time.time(), error=f"{type(exc).__name__}: {exc}", published=[])
            _append(audit, entry)
            raise
        entry.update(
            at=time.time(),
            published=published(result),
            existing=[] if result is None else result.existing,
            skipped=[] if result is None else result.skipped,
        )
        _append(audit, entry)

    return fn


def _append(path: str, entry: dict[str, Any]) -> None:
    line = json.dumps(entry) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write per line: appends of two processes never interleave
    finally:
        os.close(fd)


def read_audit(path: str) -> list[dict[str, Any]]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def stall_after_write(path: str, signal_file: str) -> Callable[[Any, int], None]:
    """Like :func:`id_writer`, but after its first write (first across processes, as long as
    ``signal_file`` exists) it writes the batch id to ``signal_file`` and stalls: the test
    kills the process there, after the output is written and before the offsets are committed.
    """
    write = id_writer(path)

    def fn(df: Any, batch_id: int, fence: Any = None) -> None:
        write(df, batch_id, fence)
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
    from jetkafka.spark._session import build_session

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

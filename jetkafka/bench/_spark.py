"""Through to Spark: events/s into Spark DataFrames, a thin wrapper over the Spark benchmark.

The conversion paths are measured by ``benchmarks/spark_arrow_vs_rows.py`` (its ``via_arrow``,
``via_rows``, ``materialize`` and ``best_time``), here on records read from Kafka rather than
built in memory, in one Spark session (``local[2]``):

- *micro-batch (Arrow)*: what :class:`~jetkafka.spark.SparkMicroBatchProcessor` does with a
  micro-batch: worker-sized chunks to Arrow record batches, one ``createDataFrame``;
- *row by row*: a tuple per record, ``createDataFrame(rows, schema)``: the baseline;
- *end to end*: a channel with the micro-batch processor reading the topic from the start into
  DataFrames (each materialized with a ``noop`` write), first event to last commit.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jetkafka.bench._stack import BenchCluster

if TYPE_CHECKING:
    from jetkafka.events import EventBatch, PartitionSource
    from jetkafka.processors._base import BatchResponse

log = logging.getLogger("jetkafka.bench")

PARTITIONS = 8
EVENT_BYTES = 200
MASTER = "local[2]"
BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "spark_arrow_vs_rows.py"


def load_benchmark() -> ModuleType:
    """The Spark benchmark script as a module; ImportError when it is not there (an installed wheel)."""
    if not BENCHMARK.is_file():
        raise ImportError(f"{BENCHMARK} not found: run from a source checkout of jetkafka")
    spec = importlib.util.spec_from_file_location("jetkafka_spark_benchmark", BENCHMARK)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {BENCHMARK}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("via_arrow", "via_rows", "materialize", "best_time"):
        if not hasattr(module, name):
            raise ImportError(f"{BENCHMARK} has no {name}()")
    return module


def read_records(kafka: dict[str, Any], topic: str, partitions: int, count: int) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**kafka, "group.id": f"spark-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False, "logger": log})
    out: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + 300
        while len(out) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(out)} of {count} records read")
            out.extend(m for m in consumer.consume(num_messages=1000, timeout=0.5) if m.error() is None)
    finally:
        consumer.close()
    return out[:count]


def end_to_end(cluster: BenchCluster, topic: str, total: int, spark: Any, bench: ModuleType) -> dict[str, Any]:
    from jetkafka.channel import InboundChannel
    from jetkafka.spark import SparkMicroBatchProcessor

    seen = {"events": 0, "first": 0.0, "last": 0.0}
    lock = threading.Lock()

    def fn(df: Any, batch_id: int) -> None:
        bench.materialize(df)

    class FirstBatchTimed(SparkMicroBatchProcessor):
        # Notes when the first batch reaches the processor: the clock starts there.
        def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
            if not seen["first"]:
                with lock:
                    seen["first"] = seen["first"] or time.perf_counter()
            return super().on_next_batch(source, events)

    processor = FirstBatchTimed(fn, spark=spark)
    group = cluster.group(f"spark-{uuid.uuid4().hex[:6]}")
    channel = InboundChannel.from_dict(cluster.channel_config(group, topic), processor=processor)
    channel.start()
    try:
        deadline = time.monotonic() + 900
        while True:
            stats = processor.stats()
            if stats.get("events", 0) >= total:
                seen["last"] = time.perf_counter()
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {stats.get('events', 0)} of {total} events reached Spark")
            time.sleep(0.01)
    finally:
        channel.shutdown(timeout=60)
    seconds = seen["last"] - seen["first"]
    return {"events": total, "seconds": seconds, "events_per_s": total / seconds, "micro_batches": stats.get("batches")}


def run(cluster: BenchCluster, events: int, repeat: int, progress: Any, topic: str | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "events": events,
        "event_bytes": EVENT_BYTES,
        "master": MASTER,
        "repeat": repeat,
        "benchmark": "benchmarks/spark_arrow_vs_rows.py (via_arrow, via_rows, materialize, best_time)",
    }
    try:
        bench = load_benchmark()
        import pyspark  # noqa: F401
    except ImportError as exc:
        progress.advance(steps())
        return {"unavailable": str(exc), "settings": settings}
    from jetkafka.config._schema import ChannelConfig, SparkConfig
    from jetkafka.spark._session import build_session

    chunk = ChannelConfig(group="g", topics=("t",)).batch_max_events
    settings["chunk_events"] = chunk
    if topic is None:
        topic = cluster.create_topic("spark", PARTITIONS)
        progress.note(f"spark: producing {events:,} events of {EVENT_BYTES} B")
        cluster.fill(topic, events, EVENT_BYTES, PARTITIONS)
    progress.note("spark: starting a Spark session")
    records = read_records(cluster.kafka, topic, PARTITIONS, events)
    spark = build_session(
        SparkConfig(
            master=MASTER,
            app_name="jetkafka-bench",
            driver_memory="2g",
            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        )
    )
    result: dict[str, Any] = {"settings": settings}
    try:
        progress.advance()
        progress.note("spark: Arrow and row-by-row DataFrames")
        for build in (bench.via_arrow, bench.via_rows):  # one unmeasured run each: warm alike
            bench.materialize(build(spark, records, chunk))
        arrow = bench.best_time(lambda: bench.materialize(bench.via_arrow(spark, records, chunk)), repeat)
        rows = bench.best_time(lambda: bench.materialize(bench.via_rows(spark, records, chunk)), repeat)
        n = len(records)
        result["arrow"] = {"events": n, "seconds": arrow, "events_per_s": n / arrow}
        result["rows"] = {"events": n, "seconds": rows, "events_per_s": n / rows}
        result["ratio"] = rows / arrow
        progress.advance()
        progress.note("spark: end to end through a channel")
        try:
            result["end_to_end"] = end_to_end(cluster, topic, events, spark, bench)
        except Exception as exc:
            log.exception("spark end to end failed")
            result["end_to_end"] = {"error": str(exc)}
        progress.advance()
    finally:
        spark.stop()
    return result


def steps() -> int:
    return 3

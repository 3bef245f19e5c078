"""Through to Spark: events/s into Spark DataFrames, a thin wrapper over the Spark benchmark.

The conversion paths are measured by ``benchmarks/spark_arrow_vs_rows.py`` (its ``via_arrow``,
``via_rows``, ``materialize`` and ``best_time``), here on records read from Kafka rather than
built in memory, in one Spark session (``local[2]``):

- *micro-batch (Arrow)*: what :class:`~jetkafka.spark.SparkMicroBatchProcessor` does with a
  micro-batch: worker-sized chunks to Arrow record batches, one ``createDataFrame``;
- *row by row*: a tuple per record, ``createDataFrame(rows, schema)``: the baseline;
- *end to end*: a channel with the micro-batch processor reading the topic from the start into
  DataFrames, first event to last commit; meanwhile the events the processor holds
  (``stats()["held_events"]``) are sampled, their peak against ``max_events`` is how many
  micro-batches it kept in memory at once;
- *hand-written loop*: the user's alternative, one consumer and a synchronous Kafka commit
  per micro-batch of the same size (:mod:`jetkafka.bench._spark_loop`).

What each path does with its DataFrames is the workload (:mod:`jetkafka.bench._spark_workload`):
a ``noop`` write (default), or the example pipeline's JSON aggregation into a ``ParquetSink``.
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

from jetkafka.bench._spark_loop import hand_loop
from jetkafka.bench._spark_workload import Workload
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


def end_to_end(cluster: BenchCluster, topic: str, total: int, spark: Any, workload: Workload) -> dict[str, Any]:
    """A channel with the micro-batch processor from the start of ``topic`` until ``total`` events
    are committed; events/s from the first batch to the last commit, and the peak held."""
    from jetkafka.channel import InboundChannel
    from jetkafka.spark import SparkMicroBatchProcessor

    seen = {"first": 0.0, "last": 0.0}
    lock = threading.Lock()

    class FirstBatchTimed(SparkMicroBatchProcessor):
        # Notes when the first batch reaches the processor: the clock starts there.
        def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
            if not seen["first"]:
                with lock:
                    seen["first"] = seen["first"] or time.perf_counter()
            return super().on_next_batch(source, events)

    processor = FirstBatchTimed(workload.batch_function(), spark=spark, **workload.processor_options())
    group = cluster.group(f"spark-{uuid.uuid4().hex[:6]}")
    channel = InboundChannel.from_dict(cluster.channel_config(group, topic, **(workload.channel or {})), processor=processor)
    peak_held = 0
    channel.start()
    try:
        deadline = time.monotonic() + 900
        while True:
            stats = processor.stats()
            # Sampled every 10 ms: a peak shorter than that may be missed, never overstated.
            peak_held = max(peak_held, stats["held_events"])
            if stats.get("events", 0) >= total:
                seen["last"] = time.perf_counter()
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {stats.get('events', 0)} of {total} events reached Spark")
            time.sleep(0.01)
    finally:
        channel.shutdown(timeout=60)
    seconds = seen["last"] - seen["first"]
    batches = stats.get("batches") or 0
    return {
        "events": total,
        "seconds": seconds,
        "events_per_s": total / seconds,
        "micro_batches": batches,
        "mean_micro_batch_events": total / batches if batches else None,
        "failures": stats.get("failures", 0),
        "peak_held_events": peak_held,
        "max_events": workload.max_events,
        "backlog_max_events": processor.bounds.ceiling_events,
        "micro_batches_in_memory_at_peak": peak_held / workload.max_events,
    }


def run(cluster: BenchCluster, events: int, repeat: int, progress: Any, topic: str | None = None,
        workload: str = "noop") -> dict[str, Any]:
    settings: dict[str, Any] = {
        "events": events,
        "event_bytes": EVENT_BYTES,
        "master": (cluster.spark.remote or cluster.spark.master) if cluster.spark is not None else MASTER,
        "repeat": repeat,
        "workload": workload,
        "benchmark": "benchmarks/spark_arrow_vs_rows.py (via_arrow, via_rows, materialize, best_time)",
    }
    try:
        bench = load_benchmark()
        import pyspark  # noqa: F401

        work = Workload.named(workload, cluster.workdir / "spark-output", bench.materialize)
    except ImportError as exc:
        progress.advance(steps())
        return {"unavailable": str(exc), "settings": settings}
    from jetkafka.config._schema import ChannelConfig, SparkConfig
    from jetkafka.spark._session import build_session

    chunk = ChannelConfig(group="g", topics=("t",)).batch_max_events
    settings["chunk_events"] = chunk
    settings["max_events"] = work.max_events
    settings["max_interval_ms"] = work.max_interval_ms
    if work.example is not None:
        settings["event_bytes"] = None  # the example's JSON events, about 70 B
    if topic is None:
        topic = cluster.create_topic("spark", PARTITIONS)
        progress.note(f"spark: producing {events:,} events ({workload} workload)")
        work.fill(cluster, topic, events, PARTITIONS, EVENT_BYTES)
    progress.note("spark: starting a Spark session")
    records = read_records(cluster.kafka, topic, PARTITIONS, events)
    spark = build_session(
        cluster.spark or SparkConfig(
            master=MASTER,
            app_name="jetkafka-bench",
            driver_memory="2g",
            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        )
    )
    result: dict[str, Any] = {"settings": settings}

    def through(build: Any) -> None:
        work.batch_function()(work.parse(build(spark, records, chunk)), 0)

    try:
        progress.advance()
        progress.note("spark: Arrow and row-by-row DataFrames")
        for build in (bench.via_arrow, bench.via_rows):  # one unmeasured run each: warm alike
            through(build)
        arrow = bench.best_time(lambda: through(bench.via_arrow), repeat)
        rows = bench.best_time(lambda: through(bench.via_rows), repeat)
        n = len(records)
        records = []  # the end-to-end run and the loop read the topic themselves: free the memory
        result["arrow"] = {"events": n, "seconds": arrow, "events_per_s": n / arrow}
        result["rows"] = {"events": n, "seconds": rows, "events_per_s": n / rows}
        result["ratio"] = rows / arrow
        progress.advance()
        progress.note("spark: end to end through a channel")
        try:
            result["end_to_end"] = end_to_end(cluster, topic, events, spark, work)
        except Exception as exc:
            log.exception("spark end to end failed")
            result["end_to_end"] = {"error": str(exc)}
        progress.advance()
        progress.note("spark: the hand-written loop")
        try:
            result["loop"] = hand_loop(cluster.kafka, topic, PARTITIONS, events, spark, work)
        except Exception as exc:
            log.exception("spark hand-written loop failed")
            result["loop"] = {"error": str(exc)}
        progress.advance()
    finally:
        spark.stop()
    e2e = result["end_to_end"].get("events_per_s")
    if e2e is not None:
        result["end_to_end_ratios"] = {
            "arrow": e2e / result["arrow"]["events_per_s"],
            "rows": e2e / result["rows"]["events_per_s"],
            "loop": e2e / result["loop"]["events_per_s"] if "events_per_s" in result["loop"] else None,
        }
    return result


def steps() -> int:
    return 4

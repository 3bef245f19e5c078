"""Latency through the example pipeline: each record's production to the commit of its micro-batch.

A producer process writes the example's JSON purchase events at a steady rate (default 10,000 events/s
for 30 s) into a topic of 8 partitions, while a channel with the example's settings (2 threads,
``batch_max_events`` 5,000, ``buffer_max_events`` 20,000) runs
:class:`~jetkafka.spark.SparkMicroBatchProcessor` with the example's function and bounds
(``minute_writer`` into a :class:`~jetkafka.spark.ParquetSink`, ``max_events`` 50,000,
``max_interval_ms`` 1,000, ``value_format`` json).

Per record, latency = the time its micro-batch's commit landed minus its production time:

- production time: the record's ``CreateTime`` timestamp, set by the producer when it is
  produced (wall clock, milliseconds);
- commit time: a watcher thread reads the committed offset of each partition's hold every
  5 ms (``hold.committed``, set once the fenced commit in ZooKeeper has landed); the records of
  the partition below it are then committed, and stamped with the wall clock of that read.
  The read lags the landing by at most one poll: latencies are overstated by up to 5 ms, never
  understated.

Records are noted when the channel hands them to the processor (before it takes them), keyed by
partition and offset; only those produced after the measured window opened count (a warm-up
record per partition runs first, so the channel's start and Spark's first job are not in it).
The producer runs in a process of its own (:mod:`jetkafka.bench._steady_producer`, so it does
not take the channel's interpreter) and keeps to its schedule in 5 ms ticks for the given time;
when it cannot, it produces less, and the achieved rate says so.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from jetkafka.bench._handoff import percentile
from jetkafka.bench._spark import MASTER
from jetkafka.bench._spark_workload import example_settings, load_example
from jetkafka.bench._stack import BenchCluster
from jetkafka.devstack._lifetime import die_with_parent

if TYPE_CHECKING:
    from confluent_kafka import Message

log = logging.getLogger("jetkafka.bench")

PARTITIONS = 8
POLL_S = 0.005  # how often the committed offsets are read
WARM_UP_ROUNDS = 3  # a second of events each, committed before the window opens
CREATE_TIME = 1  # confluent_kafka.TIMESTAMP_CREATE_TIME


class CommitWatch:
    """Records noted per partition, stamped with a latency once their partition's commit passes them.

    ``note`` runs on the channel's workers (one partition at a time each), ``poll`` on the
    watcher thread; both under ``lock``.
    """

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.context: Any = None  # the processor's ChannelContext, set in on_start
        self.since_ms: float = float("inf")  # records produced before this are the warm-up
        self.lock = threading.Lock()
        self.pending: dict[int, deque[tuple[int, int]]] = {}  # partition -> (offset, CreateTime ms)
        self.last_noted: dict[int, int] = {}
        self.latencies_s: list[float] = []
        self.without_create_time = 0

    def note(self, partition: int, messages: list[Message]) -> None:
        with self.lock:
            queue = self.pending.setdefault(partition, deque())
            last = self.last_noted.get(partition, -1)
            for m in messages:
                offset = m.offset()
                if offset is None or offset <= last:
                    continue  # re-delivered: noted already
                last = offset
                kind, created = m.timestamp()
                if kind != CREATE_TIME or created is None:
                    self.without_create_time += 1
                elif created >= self.since_ms:
                    queue.append((offset, created))
            self.last_noted[partition] = last

    def poll(self) -> None:
        context = self.context
        if context is None:
            return
        with self.lock:
            queues = list(self.pending.items())
        for partition, queue in queues:
            hold = context.hold(self.topic, partition)
            committed = hold.committed if hold is not None else None
            if committed is None:
                continue
            now_ms = time.time() * 1000
            with self.lock:
                while queue and queue[0][0] < committed:
                    self.latencies_s.append((now_ms - queue.popleft()[1]) / 1000)

    def measured(self) -> int:
        with self.lock:
            return len(self.latencies_s)


def produce_in_child(cluster: BenchCluster, topic: str, rate: int, seconds: float) -> dict[str, Any]:
    """Run :mod:`jetkafka.bench._steady_producer` and return its result."""
    kafka_path = cluster.workdir / "latency-kafka.json"
    kafka_path.write_text(json.dumps(cluster.kafka))
    result_path = cluster.workdir / "latency-production.json"
    log_path = cluster.workdir / "latency-producer.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jetkafka.bench._steady_producer", "--kafka", str(kafka_path), "--topic", topic,
             "--partitions", str(PARTITIONS), "--rate", str(rate), "--seconds", str(seconds),
             "--out", str(result_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - die_with_parent() only makes two system calls in the child
        )
        try:
            status = proc.wait(seconds + 120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    if status != 0:
        raise RuntimeError(f"the producer exited with status {status}; see {log_path}")
    result: dict[str, Any] = json.loads(result_path.read_text())
    return result


def run(cluster: BenchCluster, rate: int, seconds: float, progress: Any) -> dict[str, Any]:
    channel_settings, max_events, max_interval_ms = example_settings()
    settings: dict[str, Any] = {
        "rate_events_per_s": rate,
        "seconds": seconds,
        "partitions": PARTITIONS,
        "master": (cluster.spark.remote or cluster.spark.master) if cluster.spark is not None else MASTER,
        "channel": dict(channel_settings),
        "max_events": max_events,
        "max_interval_ms": max_interval_ms,
        "target_s": max_interval_ms / 1000 + 1.0,
        "poll_s": POLL_S,
    }
    try:
        events, aggregates = load_example()
        import pyspark  # noqa: F401
    except ImportError as exc:
        progress.advance(steps())
        return {"unavailable": str(exc), "settings": settings}
    from jetkafka.channel import InboundChannel
    from jetkafka.config._schema import SparkConfig
    from jetkafka.spark import SparkMicroBatchProcessor
    from jetkafka.spark._session import build_session

    topic = cluster.create_topic("latency", PARTITIONS)
    watch = CommitWatch(topic)

    class Watched(SparkMicroBatchProcessor):
        """The processor with its records noted, before it takes them, for the watch."""

        def on_start(self, context: Any) -> None:
            super().on_start(context)
            watch.context = context

        def on_next_batch(self, source: Any, batch: Any) -> Any:
            watch.note(source.partition, batch.messages)
            return super().on_next_batch(source, batch)

    progress.note("latency: starting a Spark session and the channel")
    spark = build_session(cluster.spark or SparkConfig(
        master=MASTER, app_name="jetkafka-bench-latency", driver_memory="2g",
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC"},
    ))
    processor = Watched(
        aggregates.minute_writer(str(cluster.workdir / "latency-output")), spark=spark, value_format="json",
        schema=events.EVENT_SCHEMA, max_events=max_events, max_interval_ms=max_interval_ms,
    )
    group = cluster.group(f"latency-{uuid.uuid4().hex[:6]}")
    channel = InboundChannel.from_dict(cluster.channel_config(group, topic, **channel_settings), processor=processor)
    stop = threading.Event()

    def watch_commits() -> None:
        while not stop.wait(POLL_S):
            watch.poll()

    watcher = threading.Thread(target=watch_commits, name="jetkafka-bench-commit-watch", daemon=True)
    result: dict[str, Any] = {"settings": settings}
    try:
        channel.start()
        warm_up(cluster, topic, events.encode, processor)  # every partition owned, a first job run
        for _ in range(WARM_UP_ROUNDS):  # micro-batches of the measured size, so the JIT has warmed
            warm_up(cluster, topic, events.encode, processor, per_partition=rate // PARTITIONS)
        progress.advance()
        progress.note(f"latency: producing {rate:,} events/s for {seconds:g} s")
        watch.since_ms = time.time() * 1000
        batches_before = processor.stats()["batches"]
        watcher.start()
        result["production"] = produce_in_child(cluster, topic, rate, seconds)
        progress.advance()
        produced = result["production"]["produced"]
        deadline = time.monotonic() + 120
        while watch.measured() < produced and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        watcher.join(5)
        stats = processor.stats()
    finally:
        stop.set()
        channel.shutdown(timeout=60)
        spark.stop()
    progress.advance()
    latencies = list(watch.latencies_s)
    if not latencies:
        result["error"] = ("no record measured" + (f" ({watch.without_create_time} records had no CreateTime)"
                                                   if watch.without_create_time else ""))
        return result
    result.update({
        "records": len(latencies),
        "unmeasured": produced - len(latencies),
        "without_create_time": watch.without_create_time,
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "max_s": max(latencies),
        "mean_s": sum(latencies) / len(latencies),
        "micro_batches": stats["batches"] - batches_before,
        "failures": stats["failures"],
    })
    return result


def warm_up(
    cluster: BenchCluster, topic: str, encode: Any, processor: Any, per_partition: int = 1, timeout_s: float = 180.0
) -> None:
    """``per_partition`` records per partition, through to their commit: the channel owns every
    partition and Spark has run its first jobs before the measured window opens (the first
    jobs of a fresh JVM are several times slower than its steady state)."""
    from jetkafka.bench._spark_workload import fill_records

    before = processor.stats()["events"]
    now_ms = int(time.time() * 1000)
    fill_records(cluster.kafka, topic, [
        (p, b"warm-up", encode({"id": f"w{p}-{i}", "user": "u000", "cents": 100, "ts": now_ms}))
        for i in range(per_partition)
        for p in range(PARTITIONS)
    ])
    deadline = time.monotonic() + timeout_s
    while processor.stats()["events"] < before + PARTITIONS * per_partition:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up records were not committed within {timeout_s:g} s")
        time.sleep(0.05)


def steps() -> int:
    return 3

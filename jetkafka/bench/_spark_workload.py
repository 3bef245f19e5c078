"""The work the Spark benchmarks do per micro-batch: ``noop`` or the example pipeline's ``aggregate``.

- ``noop``: 200 B values, kept binary; each DataFrame is materialized by a ``noop`` write (the
  cheapest full read of every column; the default, small enough for CI).
- ``aggregate``: the example pipeline's JSON purchase events (``examples/pipeline/events.py``),
  parsed with its schema, aggregated per (topic, partition, minute) and written exactly once
  with :class:`~jetkafka.spark.ParquetSink` by its ``minute_writer``
  (``examples/pipeline/aggregates.py``), with its micro-batch bounds (50,000 events, 1 s).

Every path of a run (Arrow, row by row, end to end, the hand-written loop) gets its batch
function from :meth:`Workload.batch_function`, so they all do the same work per DataFrame.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from jetkafka.bench._stack import FAST_PRODUCER, BenchCluster

log = logging.getLogger("jetkafka.bench")

WORKLOADS = ("noop", "aggregate")
REPO = Path(__file__).resolve().parents[2]
EXAMPLE_YAML = REPO / "examples" / "pipeline" / "pipeline.yaml"
# The example's channel settings that shape its micro-batches and buffers (the rest are the bench's).
EXAMPLE_CHANNEL_KEYS = ("threads", "batch_max_events", "buffer_max_events")


def example_settings() -> tuple[dict[str, Any], int, int]:
    """The example pipeline's channel settings, ``max_events`` and ``max_interval_ms``, as its YAML
    file sets them (defaults of its ``${...}`` values), so the benchmark runs what ``make run`` runs."""
    from jetkafka.config import load_config

    config = load_config(EXAMPLE_YAML, env={})
    channel = {key: getattr(config.channel, key) for key in EXAMPLE_CHANNEL_KEYS}
    options = config.processor.options if config.processor is not None else {}
    return channel, int(options["max_events"]), int(options["max_interval_ms"])


def load_example() -> tuple[ModuleType, ModuleType]:
    """The example pipeline's ``events`` and ``aggregates`` modules; ImportError outside a source checkout."""
    if not (REPO / "examples" / "pipeline" / "aggregates.py").is_file():
        raise ImportError(f"{REPO / 'examples' / 'pipeline'} not found: run from a source checkout of jetkafka")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # the examples package lives beside jetkafka, not inside it
    return importlib.import_module("examples.pipeline.events"), importlib.import_module("examples.pipeline.aggregates")


def processor_default(name: str) -> Any:
    """A default of :class:`~jetkafka.spark.SparkMicroBatchProcessor`, read from its signature."""
    from jetkafka.spark import SparkMicroBatchProcessor

    return inspect.signature(SparkMicroBatchProcessor).parameters[name].default


@dataclass(frozen=True)
class Workload:
    """What a Spark path does with each DataFrame, and the processor options that go with it."""

    name: str
    value_format: str
    schema: str | None
    max_events: int
    max_interval_ms: int
    out_dir: Path  # where the aggregate workload's Parquet output goes; removed with the run's workdir
    materialize: Callable[[Any], None]  # the benchmark script's noop write
    example: tuple[ModuleType, ModuleType] | None = None
    channel: dict[str, Any] | None = None  # channel settings of the end-to-end run (None: the bench's)

    @classmethod
    def named(cls, name: str, out_dir: Path, materialize: Callable[[Any], None]) -> Workload:
        """The workload ``name``; ImportError when ``aggregate`` cannot find the example pipeline."""
        if name not in WORKLOADS:
            raise ValueError(f"unknown Spark workload {name!r}: choose from {', '.join(WORKLOADS)}")
        if name == "noop":
            return cls(name, "binary", None, int(processor_default("max_events")),
                       int(processor_default("max_interval_ms")), out_dir, materialize)
        events, aggregates = load_example()
        channel, max_events, max_interval_ms = example_settings()
        return cls(name, "json", str(events.EVENT_SCHEMA), max_events, max_interval_ms, out_dir,
                   materialize, (events, aggregates), channel)

    def processor_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"max_events": self.max_events, "max_interval_ms": self.max_interval_ms,
                                   "value_format": self.value_format}
        if self.schema is not None:
            options["schema"] = self.schema
        return options

    def batch_function(self) -> Callable[..., None]:
        """A fresh ``fn(df, batch_id)``: for ``aggregate``, a ``minute_writer`` over a directory of
        its own (a sink that saw a batch id already would skip publishing it again)."""
        if self.example is None:
            materialize = self.materialize

            def noop_write(df: Any, batch_id: int) -> None:
                materialize(df)

            return noop_write
        writer: Callable[..., None] = self.example[1].minute_writer(str(self.out_dir / uuid.uuid4().hex[:12]))
        return writer

    def parse(self, df: Any) -> Any:
        """A DataFrame whose ``value`` is still binary, with ``value`` as the processor would give it."""
        if self.schema is None:
            return df
        from pyspark.sql import functions as F

        return df.withColumn("value", F.from_json(F.col("value").cast("string"), self.schema))

    def fill(self, cluster: BenchCluster, topic: str, count: int, partitions: int, event_bytes: int) -> None:
        """Write ``count`` records the workload reads: padded values, or the example's JSON events."""
        if self.example is None:
            cluster.fill(topic, count, event_bytes, partitions)
            return
        fill_records(cluster.kafka, topic, self.example[0].records(self.example[0].generate_events(count), partitions))


def fill_records(kafka: dict[str, Any], topic: str, records: Sequence[tuple[int, bytes, bytes]]) -> None:
    """Produce ``(partition, key, value)`` records as fast as the producer goes, flushed."""
    from confluent_kafka import KafkaError, Producer

    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    producer = Producer({**kafka, **FAST_PRODUCER, "logger": log})
    for i, (partition, key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value, key, partition=partition, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    if left or errors:
        raise RuntimeError(f"producing to {topic} failed: {left} unsent, errors: {'; '.join(errors) or '-'}")

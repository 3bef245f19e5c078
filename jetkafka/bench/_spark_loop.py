"""The user's alternative to the micro-batch processor: a hand-written loop, no coordination.

One confluent-kafka consumer is assigned every partition from the beginning; it reads
micro-batches of the processor's ``max_events``, converts each to Arrow with
:func:`jetkafka.spark.messages_to_arrow` (one record batch per partition, as the processor
does), builds the DataFrame with :func:`jetkafka.spark.to_dataframe` (one ``createDataFrame``),
calls the same batch function as the end-to-end run, then commits the consumer's offsets to
Kafka synchronously, as a careful user would, before reading the next micro-batch. No
ZooKeeper, no fencing, no overlap of reading with Spark: the figure is what a single process
gets without jetkafka, the baseline the end-to-end run should at least match.

The clock runs from the first event received to the return of the last commit, like the
end-to-end run's (first batch in the processor to the last commit).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from typing import Any

from jetkafka.bench._spark_workload import Workload

log = logging.getLogger("jetkafka.bench")

CONSUME_MAX = 10_000  # messages asked per consume() call, at most what the micro-batch still lacks


def hand_loop(kafka: dict[str, Any], topic: str, partitions: int, total: int, spark: Any,
              workload: Workload, timeout_s: float = 900.0) -> dict[str, Any]:
    """Read ``total`` events of ``topic`` through the loop; events/s and the micro-batches made."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

    from jetkafka.spark import messages_to_arrow, to_dataframe, to_table

    fn = workload.batch_function()
    consumer = Consumer({**kafka, "group.id": f"spark-loop-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                         "logger": log})
    first: float | None = None
    done = batch_id = 0
    commit_seconds = 0.0
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while done < total:
            want = min(workload.max_events, total - done)
            by_partition: dict[int, list[Message]] = defaultdict(list)
            gathered = 0
            while gathered < want:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"hand-written loop: only {done + gathered} of {total} events read")
                for m in consumer.consume(num_messages=min(CONSUME_MAX, want - gathered), timeout=0.5):
                    if m.error() is not None:
                        log.warning("hand-written loop: %s", m.error())
                        continue
                    if first is None:
                        first = time.perf_counter()
                    partition = m.partition()
                    assert partition is not None  # a consumed message always has one
                    by_partition[partition].append(m)
                    gathered += 1
            table = to_table([messages_to_arrow(ms) for ms in by_partition.values()])
            del by_partition  # the messages (and the librdkafka buffers they pin) go before Spark runs
            fn(to_dataframe(spark, table, workload.value_format, workload.schema), batch_id)
            started = time.perf_counter()
            consumer.commit(asynchronous=False)
            commit_seconds += time.perf_counter() - started
            done += gathered
            batch_id += 1
        last = time.perf_counter()
    finally:
        consumer.close()
    assert first is not None
    seconds = last - first
    return {"events": done, "seconds": seconds, "events_per_s": done / seconds, "micro_batches": batch_id,
            "commit_seconds": commit_seconds}

"""Events/s from Kafka messages to a Spark DataFrame: through Arrow, and row by row.

Both paths start from the same confluent-kafka ``Message`` objects (built in memory, JSON
values like the example pipeline's) and end with the DataFrame fully materialized (a ``noop``
write reads every column), in the same Spark session and the same run:

- *arrow*: what SparkMicroBatchProcessor does: each worker-sized chunk of messages becomes a
  ``pyarrow.RecordBatch``; the micro-batch's table goes to ``spark.createDataFrame`` at once;
- *rows*: a tuple per message, handed to ``spark.createDataFrame(rows, schema)``.

    python benchmarks/spark_arrow_vs_rows.py                    # 200,000 events, best of 3
    python benchmarks/spark_arrow_vs_rows.py --events 50000 --repeat 1 --master local[2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Message  # noqa: E402

from jetkafka.config import SparkConfig  # noqa: E402
from jetkafka.spark import (  # noqa: E402
    build_session,
    messages_to_arrow,
    to_dataframe,
    to_dataframe_row_by_row,
    to_table,
)


def make_messages(count: int, partitions: int, seed: int = 1) -> list[Message]:
    rng = random.Random(seed)
    start = 1_717_200_000_000
    out = []
    for i in range(count):
        user = rng.randrange(1000)
        value = json.dumps(
            {"id": f"e{i:09d}", "user": f"u{user:04d}", "cents": rng.randrange(100, 50_000), "ts": start + i * 7},
            separators=(",", ":"),
        ).encode()
        out.append(
            Message(
                topic="purchases", partition=user % partitions, offset=i // partitions, key=f"u{user:04d}".encode(),
                value=value, timestamp=(1, start + i * 7),
            )
        )
    return out


def via_arrow(spark: Any, messages: list[Message], chunk: int) -> Any:
    batches = [messages_to_arrow(messages[i : i + chunk]) for i in range(0, len(messages), chunk)]
    return to_dataframe(spark, to_table(batches))


def via_rows(spark: Any, messages: list[Message], chunk: int) -> Any:
    return to_dataframe_row_by_row(spark, messages)


def materialize(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def best_time(fn: Callable[[], None], repeat: int) -> float:
    """Best wall time of ``repeat`` runs, in seconds."""
    return best_time_and_cpu(fn, repeat)[0]


def best_time_and_cpu(fn: Callable[[], None], repeat: int) -> tuple[float, float]:
    """Best wall time of ``repeat`` runs, and the Python process's CPU time in that run.

    The CPU time is what the conversion takes from the jetkafka process itself (its workers and
    fetcher share that interpreter); the rest of the wall time is spent in the Spark JVM.
    """
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        run = (time.perf_counter() - wall, time.process_time() - cpu)
        best = min(best, run)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000, help="messages per measurement (default 200000)")
    parser.add_argument("--chunk", type=int, default=500, help="messages per worker batch (channel.batch_max_events)")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per path; the best one counts")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    args = parser.parse_args(argv)

    print(f"building {args.events:,} messages ...", flush=True)
    messages = make_messages(args.events, partitions=4)
    value_bytes = sum(len(m.value()) for m in messages) / len(messages)
    spark = build_session(
        SparkConfig(
            master=args.master,
            app_name="jetkafka-benchmark",
            driver_memory="2g",
            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        )
    )
    try:
        for build in (via_arrow, via_rows):  # a full unmeasured run each: JIT-compiled alike
            materialize(build(spark, messages, args.chunk))

        convert_only = best_time_and_cpu(
            lambda: [messages_to_arrow(messages[i : i + args.chunk]) for i in range(0, len(messages), args.chunk)],
            args.repeat,
        )
        arrow = best_time_and_cpu(lambda: materialize(via_arrow(spark, messages, args.chunk)), args.repeat)
        rows = best_time_and_cpu(lambda: materialize(via_rows(spark, messages, args.chunk)), args.repeat)
    finally:
        spark.stop()

    n = args.events
    print()
    print(f"events {n:,}, JSON values of {value_bytes:.0f} bytes, worker chunks of {args.chunk}, master {args.master}, "
          f"best of {args.repeat}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    print(f"{'path':<28}{'seconds':>10}{'events/s':>14}{'Python CPU s':>14}")
    for name, (wall, cpu) in (
        ("messages -> Arrow (Python)", convert_only),
        ("arrow -> DataFrame", arrow),
        ("rows -> DataFrame", rows),
    ):
        print(f"{name:<28}{wall:>10.2f}{n / wall:>14,.0f}{cpu:>14.2f}")
    print()
    print(f"arrow / rows: {rows[0] / arrow[0]:.1f}x the events per second, "
          f"{rows[1] / max(arrow[1], 1e-9):.1f}x less Python CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Files per micro-batch and write time of ParquetSink, with and without one file per slice.

Each round writes the example pipeline's aggregate (examples/pipeline/aggregates.py
``minute_partials`` over the JSON events of examples/pipeline/events.py) as one micro-batch,
once with ``one_file_per_slice=False`` (every Spark task writes a file into each slice
directory it has rows for) and once with the default (rows repartitioned by slice, one file per
slice directory), alternating, in one Spark session; the source DataFrame is cached so both
measure the aggregate and the write alone.

    python benchmarks/sink_file_sizing.py                       # 50,000 events, 4 partitions, 5 rounds
    python benchmarks/sink_file_sizing.py --shuffle-partitions 8 --master local[2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Message

from examples.pipeline.aggregates import minute_partials
from examples.pipeline.events import EVENT_SCHEMA, encode, generate_events, records
from jetkafka.config import SparkConfig
from jetkafka.spark import ParquetSink, build_session, messages_to_arrow, to_dataframe, to_table


def make_messages(count: int, partitions: int) -> list[Message]:
    events = generate_events(count)
    offsets = [0] * partitions
    out = []
    for event, (partition, key, value) in zip(events, records(events, partitions), strict=True):
        assert value == encode(event)
        out.append(Message(topic="purchases", partition=partition, offset=offsets[partition], key=key, value=value,
                           timestamp=(1, event["ts"])))
        offsets[partition] += 1
    return out


def files_of(batch_dir: Path) -> tuple[int, int]:
    """Parquet files under a batch directory, and their mean size in bytes."""
    sizes = [f.stat().st_size for f in batch_dir.rglob("*.parquet")]
    return len(sizes), int(statistics.mean(sizes)) if sizes else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=50_000, help="events per micro-batch (default 50000)")
    parser.add_argument("--partitions", type=int, default=4, help="Kafka partitions of the events (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="measured micro-batches per mode (default 5)")
    parser.add_argument("--shuffle-partitions", default="4", help="spark.sql.shuffle.partitions (default 4, as the example)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--output", choices=("minutes", "events"), default="minutes",
                        help="what is written: the example's minute_partials (default) or the events' columns")
    parser.add_argument("--no-aqe", action="store_true", help="spark.sql.adaptive.enabled false (no coalescing)")
    args = parser.parse_args(argv)

    messages = make_messages(args.events, args.partitions)
    spark = build_session(
        SparkConfig(
            master=args.master,
            app_name="jetkafka-sink-sizing",
            driver_memory="2g",
            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": args.shuffle_partitions,
                  "spark.sql.session.timeZone": "UTC",
                  "spark.sql.adaptive.enabled": "false" if args.no_aqe else "true"},
        )
    )
    table = to_table([messages_to_arrow(messages[i : i + 5000]) for i in range(0, len(messages), 5000)])
    source = to_dataframe(spark, table, "json", EVENT_SCHEMA).cache()
    source.count()
    def output(df: Any) -> Any:
        if args.output == "minutes":
            return minute_partials(df)
        return df.select("topic", "partition", "offset", "value.*")

    modes = {"per task (before)": False, "one file per slice": True}
    times: dict[str, list[float]] = {name: [] for name in modes}
    files: dict[str, tuple[int, int]] = {}
    slices: dict[str, int] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="jetkafka-sizing-") as tmp:
            for round_no in range(args.rounds + 1):  # round 0 warms both paths up, unmeasured
                for name, one_file in modes.items():
                    sink = ParquetSink(os.path.join(tmp, name.replace(" ", "-")), one_file_per_slice=one_file)
                    batch_id = round_no + 1
                    started = time.perf_counter()
                    result = sink.write(output(source), batch_id)
                    elapsed = time.perf_counter() - started
                    if round_no:
                        times[name].append(elapsed)
                    files[name] = files_of(Path(sink.path) / f"batch_id={batch_id}")
                    slices[name] = len(result.published)
    finally:
        spark.stop()

    print(f"events {args.events:,} over {args.partitions} partitions, output {args.output}, "
          f"spark.sql.shuffle.partitions {args.shuffle_partitions}, AQE {'off' if args.no_aqe else 'on'}, "
          f"master {args.master}, {args.rounds} rounds")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    print(f"{'mode':<22}{'slices':>8}{'files/batch':>13}{'mean file KiB':>15}{'median s':>10}{'best s':>8}")
    for name in modes:
        count, mean_size = files[name]
        print(f"{name:<22}{slices[name]:>8}{count:>13}{mean_size / 1024:>15.1f}"
              f"{statistics.median(times[name]):>10.3f}{min(times[name]):>8.3f}")
    before, after = (statistics.median(times[name]) for name in modes)
    print(f"\nwrite time, one file per slice / per task: {after / before:.2f} (median of {args.rounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

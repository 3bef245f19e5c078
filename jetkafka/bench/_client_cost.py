"""Client cost: the throughput readers fed from inside the process, with no broker, on one CPU.

With the broker on the same machine, the throughput figure moves with the broker as much as
with the client: the time it takes to answer the first fetch, the CPU it takes from the
readers, the way a small VM spreads the readers' threads over its CPUs next to it. This part
takes all of that out, to show what each reader costs per event:

- both readers get their messages from :class:`BuiltMessages`, which builds them the way
  ``Consumer.consume()`` does (a confluent-kafka ``Message`` per event, with its own copy of a
  200 B value, up to 500 per call, one partition per call, partitions in turn);
- every thread of the process runs on one CPU (:func:`one_cpu`), so that the figure is the
  CPU work of each reader and not how the scheduler placed its threads;
- the channel is otherwise the one users run: it takes its partitions and commits its
  offsets in ZooKeeper, and is timed to the commit of the last offset, as in ``throughput``.

The topic exists on the broker (the channel checks it and reads its start offsets there) but
holds nothing; no event is fetched from the broker.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from jetkafka.bench._stack import BenchCluster
from jetkafka.bench._throughput import (
    EVENT_BYTES,
    PARTITIONS,
    PLAIN_POLL,
    Sample,
    alternate,
    channel_defaults,
    jetkafka_run,
    process_cpu_seconds,
    steps,
    summarise,
    variants,
)
from jetkafka.channel._fetcher import ConsumerWrapper

__all__ = ["BuiltMessages", "built_source", "one_cpu", "plain_loop", "run", "steps"]


class BuiltMessages:
    """Stands in for the fetching consumer: ``consume()`` returns messages built in this process.

    Each assigned partition yields offsets from its assigned offset up to ``per_partition``;
    a call returns one partition's next run, partitions taking turns. Pausing a partition
    holds it back, as librdkafka does. Everything else goes to ``consumer`` (the real one,
    which is never assigned anything, so it fetches nothing).
    """

    def __init__(self, topic: str, per_partition: int, value: bytes, consumer: Consumer | None = None) -> None:
        self._topic = topic
        self._per_partition = per_partition
        self._value = value
        self._consumer = consumer
        self._next: dict[int, int] = {}
        self._paused: set[int] = set()
        self._turn = 0

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        # consume() lets the other threads run while librdkafka works: so does this.
        time.sleep(0)
        ready = [p for p, offset in self._next.items() if offset < self._per_partition and p not in self._paused]
        if not ready:
            time.sleep(min(max(timeout, 0.0), 0.01))
            return []
        partition = ready[self._turn % len(ready)]
        self._turn += 1
        start = self._next[partition]
        end = min(self._per_partition, start + num_messages)
        self._next[partition] = end
        topic, value = self._topic, self._value
        return [Message(topic=topic, partition=partition, offset=o, value=value) for o in range(start, end)]

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._next[tp.partition] = tp.offset

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._next.pop(tp.partition, None)
            self._paused.discard(tp.partition)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._paused.update(tp.partition for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._paused.difference_update(tp.partition for tp in partitions)

    def seek(self, partition: TopicPartition) -> None:
        """Nothing to wake: the built log has no broker thread to sleep."""

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        """The built log's watermarks, 0 and ``per_partition``, as librdkafka reports those of
        a partition it fetches from (the channel reads the cached high watermark to tell a
        partition that drained its log from one waiting for more)."""
        return 0, self._per_partition

    def commit(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to mirror: the broker holds none of these offsets."""

    def __getattr__(self, name: str) -> Any:
        if self._consumer is None:
            raise AttributeError(name)
        return getattr(self._consumer, name)


def built_source(topic: str, per_partition: int, value: bytes) -> ConsumerWrapper:
    """A channel's ``wrap_consumer``: its fetching consumer reads from :class:`BuiltMessages`."""

    def wrap(consumer: Consumer, role: str) -> Any:
        return BuiltMessages(topic, per_partition, value, consumer) if role == "fetch" else consumer

    return wrap


@contextmanager
def one_cpu() -> Iterator[int | None]:
    """Every thread of this process, and every thread started meanwhile, on one CPU; the CPU,
    or None where threads cannot be pinned or there is only one."""
    if not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
        yield None
        return
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        yield None
        return
    # The last CPU: the first usually also takes the machine's interrupts.
    cpu = max(allowed)
    _pin_threads({cpu})
    try:
        yield cpu
    finally:
        _pin_threads(allowed)


def _pin_threads(cpus: set[int]) -> None:
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # the thread ended meanwhile


def plain_loop(topic: str, per_partition: int, value: bytes) -> Sample:
    """The throughput part's plain loop over :class:`BuiltMessages`: every partition from 0."""
    source = BuiltMessages(topic, per_partition, value)
    total = per_partition * PARTITIONS
    cpu = process_cpu_seconds()
    begin = time.perf_counter()
    source.incremental_assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count = 0
    consume = source.consume
    while count < total:
        for m in consume(num_messages=PLAIN_POLL, timeout=0.5):
            if m.error() is None:
                count += 1
    seconds = time.perf_counter() - begin
    return Sample("plain", count, seconds, seconds, process_cpu_seconds() - cpu)


def run(cluster: BenchCluster, events: int, repeat: int, progress: Any) -> dict[str, Any]:
    """Measure the throughput part's variants on built messages, ``repeat`` times each."""
    per_partition = events // PARTITIONS
    total = per_partition * PARTITIONS
    value = b"x" * EVENT_BYTES
    try:
        Message(topic="t", partition=0, offset=0, value=value)
    except TypeError:
        progress.advance(steps(repeat))
        return {"unavailable": "this confluent-kafka cannot build messages in Python (Message() takes no "
                "arguments); upgrade confluent-kafka"}
    topic = cluster.create_topic(f"client-{uuid.uuid4().hex[:6]}", PARTITIONS)
    source = built_source(topic, per_partition, value)
    ends = {p: per_partition for p in range(PARTITIONS)}
    todo = variants(
        lambda: plain_loop(topic, per_partition, value),
        lambda name, **settings: jetkafka_run(
            cluster, topic, total, name, wrap_consumer=source, ends=ends, **settings
        ),
    )
    progress.advance()
    with one_cpu() as cpu:
        samples = alternate(todo, repeat, progress, "client cost")
    return {
        "settings": {
            "events": total,
            "event_bytes": EVENT_BYTES,
            "partitions": PARTITIONS,
            "repeat": repeat,
            "cpu": cpu,
            "channel_defaults": channel_defaults(),
            "source": f"confluent_kafka.Message built per event in this process, up to {PLAIN_POLL} per consume() "
            "call, one partition per call; no broker fetch",
            "timed": "assignment to last event (jetkafka: to the commit of the last batch); median of runs",
        },
        "rows": summarise(todo, samples),
        "target_ratio": 0.9,
    }

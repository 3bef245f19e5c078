"""A real stale writer against ParquetSink: two channels with ZooKeeper sessions of their own.

Instance A stages micro-batch K and stops between writing and publishing (``fn`` waits on an
event the test controls). Its session is then expired for real (a second client attaches to
it and closes it); the partitions are taken again, by instance B and by A's new session, and B
replays K and publishes its slices. Only then does A's stale run go on to publish. Asserted:
the stale run publishes nothing (its fence says the holds are gone, or, right after the expiry,
that the lease ran out), B's slices of K are left
byte for byte, B's fencing tokens are greater than the stale run's, no slice is lost and every
event is in the output exactly once.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from examples.pipeline.events import EVENT_SCHEMA, encode, generate_events
from jetkafka.channel import InboundChannel
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.spark import BatchFence, ParquetSink, Publication, SparkMicroBatchProcessor, StaleWriter
from tests.spark.helpers import event_ids, read_ids
from tests.support.channels import channel_config, wait_until
from tests.support.zk_faults import expire_session

PARTITIONS = 2
EVENTS = 1_000


class Recorder:
    """``fn(df, batch_id, fence)``: writes with the fence and records each publication. With
    ``stall_first``, its first call stages the batch and waits for ``go`` before publishing."""

    def __init__(self, sink: ParquetSink, stall_first: bool = False) -> None:
        self.sink = sink
        self.stall_first = stall_first
        self.calls: list[tuple[int, dict[tuple[str, int], int], Publication | StaleWriter]] = []
        self.staged = threading.Event()
        self.go = threading.Event()

    def __call__(self, df: Any, batch_id: int, fence: BatchFence) -> None:
        if self.stall_first:
            self.stall_first = False
            staged = self.sink.stage(event_ids(df), batch_id)
            self.staged.set()
            assert self.go.wait(180), "the test never let the stale writer go on"
            try:
                result = staged.publish(fence)
            except StaleWriter as exc:  # refused as a whole: the lease had not come back yet
                self.calls.append((batch_id, fence.tokens, exc))
                raise
        else:
            result = self.sink.write(event_ids(df), batch_id, fence)
        self.calls.append((batch_id, fence.tokens, result))


def files_under(root: Path, batch_id: int) -> dict[str, list[str]]:
    """Each published leaf of ``batch_id`` and its files."""
    out = {}
    for leaf in sorted((root / f"batch_id={batch_id}").glob("topic=*/partition=*")):
        out[str(leaf.relative_to(root))] = sorted(os.listdir(leaf))
    return out


def test_a_stale_writer_woken_mid_publish_cannot_touch_the_new_owners_slices(
    spark: Any, zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    events = generate_events(EVENTS, seed=9)
    produce(topic, [(i % PARTITIONS, None, encode(e)) for i, e in enumerate(events)])
    out = tmp_path / "events"
    sink = ParquetSink(str(out))
    stale, fresh = Recorder(sink, stall_first=True), Recorder(sink)

    def channel(fn: Recorder, connect: str) -> tuple[InboundChannel, SparkMicroBatchProcessor]:
        processor = SparkMicroBatchProcessor(
            fn, value_format="json", schema=EVENT_SCHEMA, max_events=10_000, max_interval_ms=300, spark=spark
        )
        config = channel_config(connect, kafka_config, [topic], batch_max_events=200)
        return InboundChannel.from_dict(config, processor=processor), processor

    # A second connect string naming the same server: the process gets a second session for B.
    hosts, chroot = zk_connect.split("/", 1)
    a, _ = channel(stale, zk_connect)
    b, _ = channel(fresh, f"{hosts},{hosts}/{chroot}")
    store = OffsetStore(zk, GroupPaths("g"))
    a.start()
    try:
        assert stale.staged.wait(120), "A's first micro-batch never reached fn"
        b.start()
        assert a._controller is not None and b._controller is not a._controller
        expire_session(a._controller.client)
        # B takes what it can and replays K for it; A's new session takes the rest.
        wait_until(
            lambda: any(call[2].published for call in fresh.calls), timeout=120, what="B to replay and publish K"
        )
        (k,) = {call[0] for call in fresh.calls if call[2].published}
        before = files_under(out, k)
        assert before, "B published nothing of K"
        stale.go.set()
        wait_until(lambda: len(stale.calls) >= 1, timeout=60, what="the stale run to end")
        wait_until(
            lambda: store.read_all(topic) == {p: EVENTS // PARTITIONS for p in range(PARTITIONS)},
            timeout=120,
            what="every offset committed",
        )
    finally:
        stale.go.set()
        b_clean = b.shutdown()
        a_clean = a.shutdown()
    assert a_clean and b_clean

    stale_id, stale_tokens, stale_result = stale.calls[0]
    assert stale_id == k
    if isinstance(stale_result, Publication):  # the lease was back: each slice refused as not held
        assert stale_result.published == [] and stale_result.existing == []
        assert sorted(stale_result.skipped) == [f"batch_id={k}/topic={topic}/partition={p}" for p in range(PARTITIONS)]
    else:
        assert "lease ran out" in str(stale_result)
    assert not any((out / "_jetkafka-staging").iterdir()), "the stale run left its staging behind"
    after = files_under(out, k)
    assert {leaf: after[leaf] for leaf in before} == before, "the new owner's slices of K were replaced"
    for _, tokens, _result in fresh.calls:
        for key, token in tokens.items():
            assert token > stale_tokens[key], (key, token, stale_tokens)
    ids = [i for i, _ in read_ids(str(out))]
    assert len(ids) == EVENTS, f"{len(ids) - len(set(ids))} duplicates, {EVENTS - len(set(ids))} missing"
    assert set(ids) == {e["id"] for e in events}

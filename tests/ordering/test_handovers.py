"""Graceful hand-overs under ``ordering: key | none``: the commit point's map carries what
finished, so nothing is processed twice, and an offset reset drops it.

Every test counts every delivery by id: each produced record delivered at least once,
duplicates only where the guarantee allows them (none after a graceful release), and each
key's records in offset order within every run of one owner.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kazoo.client import KazooClient

from jetkafka import InboundChannel, parse_config
from jetkafka.ops._reset import reset_offsets
from jetkafka.ordering import CommitPoint
from jetkafka.ordering._commit_point import finished_of
from tests.ordering.support import KEYS, KeyRecorder, Owner, commit_point, key_of, key_order_breaks, keyed
from tests.support.channels import channel_config, wait_until
from tests.support.group_watch import Sampler

SLOW_KEY = 0
SLOW_S = 2.0


def key_config(zk_connect: str, kafka_config: dict[str, Any], topic: str, **channel: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"ordering": "key", "threads": 4, "batch_max_events": 4, **channel}
    return channel_config(zk_connect, kafka_config, [topic], **settings)


def slow_first(first_id: int) -> Callable[[Any], float]:
    """The batch holding record ``first_id`` is kept SLOW_S in hand: its key is held back."""
    return lambda event: SLOW_S if int(event.value) == first_id else 0.0


def leave_a_map(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic: str, ids: range
) -> tuple[KeyRecorder, CommitPoint]:
    """Run a key-mode owner over ``ids`` (one partition, already produced) whose first record's
    key is slow, shut it down while that key holds the commit point back, and return what it
    delivered and the commit point it left."""
    recorder = KeyRecorder("first", hold=slow_first(ids[0]))
    channel = InboundChannel.from_dict(key_config(zk_connect, kafka_config, topic), processor=recorder)
    channel.start()
    try:
        others = {i for i in ids if key_of(i) != key_of(ids[0])}
        wait_until(lambda: others <= set(recorder.ids()), what="every other key's records")
        assert recorder.in_flight_offsets(), "the slow key's batch ended before the shutdown"
    finally:
        assert channel.shutdown(30)
    point = commit_point(zk, topic, 0)
    assert isinstance(point, CommitPoint), f"no map left in the offset node: {point!r}"
    assert recorder.violations == [] and key_order_breaks(recorder.seen) == []
    return recorder, point


def test_a_graceful_shutdown_commits_the_map_and_the_next_start_processes_only_the_rest(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    ids = range(20 * KEYS)
    assert produce(topic, keyed(ids, 1)) == list(ids)  # one partition: offset == id

    first, point = leave_a_map(zk, zk_connect, kafka_config, topic, ids)
    done = set(first.ids())
    assert len(done) == len(first.ids()), "a record delivered twice by one owner"
    open_ = set(ids) - done
    # The node holds exactly what the owner did: the lowest record it did not process, and
    # every record it processed above that one.
    assert int(point) == min(open_) > 0
    assert point.finished_offsets() == {o for o in done if o > point}
    # Only the slow key was held back; every other key ran on past it.
    assert open_ and {key_of(i) for i in open_} == {SLOW_KEY}
    print(f"shutdown left {point!r}: {point.finished_count} finished above, {len(open_)} open")

    second = KeyRecorder("second")
    channel = InboundChannel.from_dict(key_config(zk_connect, kafka_config, topic), processor=second)
    channel.start()
    try:
        wait_until(lambda: set(second.ids()) >= open_, what="the open records")
        wait_until(lambda: commit_point(zk, topic, 0) == len(ids), what="the commit at the end")
        time.sleep(0.3)  # anything delivered twice would show by now
    finally:
        assert channel.shutdown(30)
    assert Counter(second.ids()) == Counter(open_), "the second owner processed a finished record again"
    final = commit_point(zk, topic, 0)
    assert final == len(ids) and finished_of(final) == ()
    assert second.violations == [] and key_order_breaks(second.seen) == []


def test_a_partition_mode_owner_honours_the_map_and_a_reset_drops_it(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    ids = range(20 * KEYS)
    produce(topic, keyed(ids, 1))
    first, point = leave_a_map(zk, zk_connect, kafka_config, topic, ids)
    open_ = set(ids) - set(first.ids())

    # A partition-mode owner: one batch at a time in offset order, skipping what the map names.
    # Its batches are slow enough for the sampler to see the map shrink as the position passes.
    ordered = KeyRecorder("partition", hold=lambda event: 0.05)
    config = channel_config(zk_connect, kafka_config, [topic], threads=2, batch_max_events=2, commit_interval_ms=0)
    channel = InboundChannel.from_dict(config, processor=ordered)
    sampler = Sampler(lambda: commit_point(zk, topic, 0), interval=0.02, name="commit point")
    channel.start()
    try:
        wait_until(lambda: commit_point(zk, topic, 0) == len(ids), what="the partition-mode owner at the end")
        time.sleep(0.3)
    finally:
        sampler.stop()
        assert channel.shutdown(30)
    assert Counter(ordered.ids()) == Counter(open_), "a record finished by the key-mode owner was delivered again"
    assert [s.offset for s in ordered.seen] == sorted(open_)  # offset order, the partition mode's
    history = [(int(v), finished_of(v)) for v in sampler.distinct() if v is not None]
    counts = [sum(b - a for a, b in runs) for _, runs in history]
    assert history[0] == (int(point), point.finished) and history[-1] == (len(ids), ())
    assert [o for o, _ in history] == sorted(o for o, _ in history), history
    assert counts == sorted(counts, reverse=True), f"the map grew under a partition-mode owner: {counts}"
    assert len(set(counts)) > 2, f"the map did not shrink step by step: {counts}"
    print(f"map sizes seen under the partition-mode owner: {counts}")

    # A key-mode owner leaves a map again over new records; a reset to below its commit point
    # writes a bare offset and everything from there is processed again, nothing skipped.
    more = range(len(ids), len(ids) + 20 * KEYS)
    produce(topic, keyed(more, 1))
    _, point = leave_a_map(zk, zk_connect, kafka_config, topic, more)
    reset_to = int(point) - 3
    assert point.finished_count > 0
    result = reset_offsets(parse_config(channel_config(zk_connect, kafka_config, [topic])), topic, reset_to)
    assert result.ok and result.targets == {0: reset_to}
    node = commit_point(zk, topic, 0)
    assert node == reset_to and type(node) is int, f"the reset kept a map: {node!r}"

    after = KeyRecorder("after reset")
    channel = InboundChannel.from_dict(key_config(zk_connect, kafka_config, topic), processor=after)
    channel.start()
    try:
        wait_until(lambda: commit_point(zk, topic, 0) == more[-1] + 1, what="the owner after the reset at the end")
        time.sleep(0.3)
    finally:
        assert channel.shutdown(30)
    expected = range(reset_to, more[-1] + 1)
    assert Counter(after.ids()) == Counter(expected), "the reset skipped or repeated records"
    finished_again = point.finished_offsets() & set(after.ids())
    assert finished_again == point.finished_offsets()  # the dropped map's records: processed again
    assert after.violations == [] and key_order_breaks(after.seen) == []


@pytest.mark.parametrize("ordering", ["key", "none"])
def test_two_instances_hand_partitions_over_mid_stream_without_a_duplicate(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce, ordering: str
) -> None:
    partitions = 4
    topic = topic_factory(partitions=partitions)
    ids = range(600)
    produce(topic, keyed(ids, partitions))
    config = key_config(zk_connect, kafka_config, topic, ordering=ordering, threads=2, max_in_flight_per_partition=40)
    per_batch = lambda event: 0.03  # noqa: E731 - slow enough that every hand-over lands mid-stream
    first = Owner(config, KeyRecorder("a", hold=per_batch, exclusive_keys=ordering == "key"))
    second: Owner | None = None
    try:
        wait_until(lambda: len(first.recorder.ids()) >= 100, what="the first instance under way")
        # A second instance joins: half the partitions are released to it mid-stream.
        second = Owner(config, KeyRecorder("b", hold=per_batch, exclusive_keys=ordering == "key"))
        wait_until(
            lambda: len(first.recorder.terminations) == partitions // 2, what="the rebalance's graceful releases"
        )
        released_at = len(first.recorder.ids())
        wait_until(lambda: len(second.recorder.ids()) >= 100, what="the second instance under way")
        # The first leaves: the second takes the rest over, mid-stream again.
        assert first.close()
        assert len(first.recorder.ids()) < len(ids), "the first instance finished before it left"
        everything = set(ids)
        wait_until(lambda: set(first.recorder.ids()) | set(second.recorder.ids()) >= everything, what="every record")
        time.sleep(0.5)
    finally:
        first.close()
        if second is not None:
            second.close()
    assert second is not None
    seen = first.recorder.seen + second.recorder.seen
    counts = Counter(s.id for s in seen)
    assert set(counts) == set(ids)
    assert {i: n for i, n in counts.items() if n > 1} == {}, "a graceful hand-over repeated records"
    assert first.recorder.violations == [] and second.recorder.violations == []
    if ordering == "key":
        assert key_order_breaks(seen) == []
    # Each released what it held: the first half at the rebalance and half when it left, the
    # second all at the end.
    assert len(first.recorder.terminations) == len(second.recorder.terminations) == partitions
    print(
        f"{ordering}: {len(first.recorder.ids())} records by the first instance ({released_at} before the rebalance), "
        f"{len(second.recorder.ids())} by the second; {len(first.recorder.terminations)} graceful releases"
    )


def test_hot_deploy_from_partition_to_key_to_none_loses_and_repeats_nothing(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce
) -> None:
    partitions = 2
    topic = topic_factory(partitions=partitions)
    path = tmp_path / "channel.yaml"
    config = channel_config(zk_connect, kafka_config, [topic], threads=3, batch_max_events=5)
    path.write_text(yaml.safe_dump(config))
    recorder = KeyRecorder("one", hold=lambda event: 0.03)
    channel = InboundChannel.from_yaml(path, processor=recorder)
    channel.start()
    channel.watch()
    sent = 0

    def load(count: int) -> None:
        nonlocal sent
        produce(topic, keyed(range(sent, sent + count), partitions))
        sent += count

    try:
        load(600)
        wait_until(lambda: len(recorder.ids()) >= 150, what="processing under partition")
        for phase, ordering in enumerate(("key", "none"), start=1):
            if ordering == "none":
                recorder.exclusive_keys = False  # keys may now run side by side
            # Edited while records are still being processed: a resubscribe mid-stream.
            config["channel"]["ordering"] = ordering
            path.write_text(yaml.safe_dump(config))
            wait_until(lambda o=ordering: channel.config.channel.ordering == o, what=f"ordering {ordering} applied")
            wait_until(lambda p=phase: len(recorder.terminations) == p * partitions, what="the resubscribe's releases")
            assert len(recorder.ids()) < sent, f"every record was processed before the switch to {ordering}"
            load(600)
            wait_until(lambda: len(recorder.ids()) >= sent - 450, what=f"processing under {ordering}")
        wait_until(lambda: set(recorder.ids()) >= set(range(sent)), what="every record")
        time.sleep(0.3)
    finally:
        assert channel.shutdown(30)
    counts = Counter(recorder.ids())
    assert set(counts) == set(range(sent))
    assert {i: n for i, n in counts.items() if n > 1} == {}, "a resubscribe repeated records"
    assert recorder.violations == []
    assert key_order_breaks(s for s in recorder.seen if s.run < 2) == []  # partition, then key
    assert recorder.errors == []


def test_a_reset_of_a_running_key_mode_owner_waits_for_its_batches_and_re_processes_everything_after(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    ids = range(20 * KEYS)
    produce(topic, keyed(ids, 1))
    recorder = KeyRecorder("one", hold=slow_first(0))
    config = key_config(zk_connect, kafka_config, topic)
    channel = InboundChannel.from_dict(config, processor=recorder)
    channel.start()
    try:
        others = {i for i in ids if key_of(i) != SLOW_KEY}
        wait_until(lambda: others <= set(recorder.ids()), what="every other key's records")
        wait_until(lambda: finished_of(commit_point(zk, topic, 0)) != (), what="a map committed")
        slow_batch = recorder.in_flight_offsets()
        assert slow_batch, "the slow key's batch ended before the reset"
        reset_to = 0  # the commit point itself: only the map changes (it goes)
        at_reset = len(recorder.seen)  # a reset begins a new run of this owner
        reset_started = time.monotonic()
        result = reset_offsets(parse_config(config), topic, reset_to)
        assert result.ok and result.targets == {0: reset_to}
        wait_until(lambda: commit_point(zk, topic, 0) == len(ids), what="the owner at the end again")
        time.sleep(0.3)
    finally:
        assert channel.shutdown(30)
    # The instance moved its own partition only after the slow batch had ended: every batch of
    # the new position started after that.
    (slow_end,) = [end for start, end, batch_ids in recorder.spans if 0 in batch_ids and start < reset_started]
    again = [start for start, _, batch_ids in recorder.spans if start >= reset_started]
    assert again and min(again) >= slow_end, "a batch of the new position started before the slow batch ended"
    after = [s.id for s in recorder.seen[at_reset:]]
    # Everything from the reset offset once more, the slow batch's records too: its results,
    # which came in while the reset waited, belong to the position the reset replaced.
    assert Counter(after) == Counter(range(reset_to, len(ids))), "the reset skipped or repeated records"
    assert recorder.violations == []
    assert key_order_breaks(recorder.seen[:at_reset]) == key_order_breaks(recorder.seen[at_reset:]) == []
    final = commit_point(zk, topic, 0)
    assert final == len(ids) and finished_of(final) == ()


def test_a_partition_mode_owner_released_before_passing_the_map_hands_it_on(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    ids = range(20 * KEYS)
    produce(topic, keyed(ids, 1))
    first, point = leave_a_map(zk, zk_connect, kafka_config, topic, ids)
    open_ = sorted(set(ids) - set(first.ids()))

    # A partition-mode owner processes a few of the open records and is shut down gracefully.
    ordered = KeyRecorder("partition", hold=lambda event: 0.1)
    config = channel_config(zk_connect, kafka_config, [topic], threads=2, batch_max_events=1)
    channel = InboundChannel.from_dict(config, processor=ordered)
    channel.start()
    try:
        wait_until(lambda: len(ordered.ids()) >= 3, what="a few open records processed")
    finally:
        assert channel.shutdown(30)
    middle = commit_point(zk, topic, 0)
    done_by_partition_owner = set(ordered.ids())
    assert done_by_partition_owner and len(done_by_partition_owner) < len(open_)
    assert done_by_partition_owner == set(open_[: len(done_by_partition_owner)])  # offset order
    assert int(middle) == open_[len(done_by_partition_owner)]
    # The map's offsets above its position are still in the node, untouched.
    assert middle.finished_offsets() == {o for o in point.finished_offsets() if o > middle}  # type: ignore[attr-defined]

    last = KeyRecorder("last")
    channel = InboundChannel.from_dict(key_config(zk_connect, kafka_config, topic), processor=last)
    channel.start()
    try:
        wait_until(lambda: commit_point(zk, topic, 0) == len(ids), what="the last owner at the end")
        time.sleep(0.3)
    finally:
        assert channel.shutdown(30)
    assert Counter(last.ids()) == Counter(set(open_) - done_by_partition_owner)
    total = Counter(first.ids()) + Counter(ordered.ids()) + Counter(last.ids())
    assert total == Counter(ids), "three graceful owners lost or repeated records"


@pytest.mark.parametrize("to", ["partition", "none"])
def test_a_hot_deploy_while_a_key_holds_the_commit_point_back_carries_the_map_over(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce, to: str
) -> None:
    topic = topic_factory(partitions=1)
    ids = range(20 * KEYS)
    produce(topic, keyed(ids, 1))
    path = tmp_path / "channel.yaml"
    config = key_config(zk_connect, kafka_config, topic)
    path.write_text(yaml.safe_dump(config))
    recorder = KeyRecorder("one", hold=slow_first(0))
    channel = InboundChannel.from_yaml(path, processor=recorder)
    channel.start()
    channel.watch()
    try:
        others = {i for i in ids if key_of(i) != SLOW_KEY}
        wait_until(lambda: others <= set(recorder.ids()), what="every other key's records")
        assert recorder.in_flight_offsets(), "the slow key's batch ended before the hot deploy"
        recorder.exclusive_keys = to == "key"
        config["channel"]["ordering"] = to
        path.write_text(yaml.safe_dump(config))
        wait_until(lambda: channel.config.channel.ordering == to, what=f"ordering {to} applied")
        wait_until(lambda: commit_point(zk, topic, 0) == len(ids), what="the end under the new ordering")
        time.sleep(0.3)
    finally:
        assert channel.shutdown(30)
    assert recorder.terminations and recorder.terminations[0][0] == 0
    counts = Counter(recorder.ids())
    assert set(counts) == set(ids)
    assert {i: n for i, n in counts.items() if n > 1} == {}, "the resubscribe repeated finished records"
    assert key_order_breaks(s for s in recorder.seen if s.run == 0) == []

"""Hot deploy from an edited YAML file, under load, counting every event."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from jetkafka import BatchResponse, EventBatch, InboundChannel, JetkafkaConfig, PartitionSource, parse_config
from jetkafka.channel._hot_deploy import Change, plan_change
from tests.support.channels import RecordingProcessor, channel_config, committed_offsets, values, wait_until


def write_config(path: Path, config: dict[str, Any], via_rename: bool = False) -> None:
    text = yaml.safe_dump(config)
    if via_rename:  # what many editors do: write a temporary file, rename it over the original
        tmp = path.with_suffix(".swp")
        tmp.write_text(text)
        os.replace(tmp, path)
    else:
        path.write_text(text)


class Tracking(RecordingProcessor):
    def on_stream_termination(self, source):  # type: ignore[no-untyped-def]
        return super().on_stream_termination(source)


def base(zk_connect: str, kafka_config: dict, topic: str) -> dict[str, Any]:
    return channel_config(zk_connect, kafka_config, [topic], threads=2, batch_max_events=20)


def parsed(config: dict[str, Any]) -> JetkafkaConfig:
    return parse_config(config)


def test_plan_change_classifies_every_kind(zk_connect, kafka_config) -> None:
    old = base(zk_connect, kafka_config, "t")

    def changed(**channel: Any) -> dict[str, Any]:
        return {**old, "channel": {**old["channel"], **channel}}

    assert plan_change(parsed(old), parsed(old)).kind == "none"
    assert plan_change(parsed(old), parsed(changed(batch_max_events=7))).kind == "in-place"
    assert plan_change(parsed(old), parsed(changed(commit_interval_ms=0))).kind == "in-place"
    assert plan_change(parsed(old), parsed({**old, "logging": {"level": "DEBUG"}})).kind == "in-place"
    assert plan_change(parsed(old), parsed(changed(threads=4))).kind == "resubscribe"
    assert plan_change(parsed(old), parsed(changed(topics=["u"]))).kind == "resubscribe"
    zk_moved = {**old, "zookeeper": {**old["zookeeper"], "session_timeout_s": 9}}
    assert plan_change(parsed(old), parsed(zk_moved)).keys == ("zookeeper",)


def test_threads_then_coordinator_then_invalid_file_under_load(
    tmp_path, zk_connect, kafka_config, topic_factory, produce, caplog
) -> None:
    topic = topic_factory(partitions=4)
    path = tmp_path / "channel.yaml"
    config = base(zk_connect, kafka_config, topic)
    write_config(path, config)
    proc = Tracking()
    channel = InboundChannel.from_yaml(path, processor=proc)
    channel.start()
    channel.watch()
    sent = 0

    def load(n: int) -> None:
        nonlocal sent
        produce(topic, values(n, 4, start=sent))
        sent += n

    try:
        load(400)
        wait_until(lambda: len(proc.delivered) >= 400)

        # threads 2 -> 4: partitions are released gracefully and taken again.
        config["channel"]["threads"] = 4
        write_config(path, config, via_rename=True)
        wait_until(lambda: channel.config.channel.threads == 4, what="threads applied")
        wait_until(lambda: len(channel.owned_partitions()) == 4)
        assert len(proc.calls_named("termination")) == 4
        load(400)
        wait_until(lambda: set(proc.ids()) >= set(range(800)), what="first 800 delivered")

        # dynamic -> static with two partitions.
        config["channel"].update(coordinator="static", partitions={topic: [1, 3]})
        write_config(path, config)
        wait_until(lambda: channel.owned_partitions() == [(topic, 1), (topic, 3)], what="static partitions")
        load(400)
        wait_until(lambda: len({i for i in proc.ids() if i % 4 in (1, 3)}) == 600, what="static share delivered")

        # An invalid file keeps the running configuration.
        caplog.set_level(logging.ERROR, logger="jetkafka.hot_deploy")
        path.write_text(path.read_text().replace("threads: 4", "threads: four"))
        wait_until(lambda: "still running on the previous configuration" in caplog.text, what="error logged")
        assert "channel.threads" in caplog.text
        load(400)
        wait_until(lambda: len({i for i in proc.ids() if i % 4 in (1, 3)}) == 800)
        assert channel.owned_partitions() == [(topic, 1), (topic, 3)]
        assert channel.config.channel.coordinator == "static"
    finally:
        channel.shutdown()
    ids = proc.ids()
    expected_static = {i for i in range(sent) if i % 4 in (1, 3) or i < 800}
    # 0 lost: everything consumed while the partitions were owned here was delivered.
    assert expected_static <= set(ids)
    # Releases committed what was processed, so nothing was delivered twice.
    assert len(ids) == len(set(ids))
    assert proc.violations == []


def test_in_place_change_keeps_partitions(tmp_path, zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=2)
    path = tmp_path / "channel.yaml"
    config = base(zk_connect, kafka_config, topic)
    write_config(path, config)
    sizes: list[int] = []
    proc = RecordingProcessor()
    original = proc._response

    def respond(source, events):  # type: ignore[no-untyped-def]
        sizes.append(len(events))
        return original(source, events)

    proc._response = respond
    with InboundChannel.from_yaml(path, processor=proc) as channel:
        channel.watch()
        produce(topic, values(200, 2))
        wait_until(lambda: len(proc.delivered) == 200)
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100, 1: 100}, what="commits landed")
        config["channel"]["batch_max_events"] = 5
        config["channel"]["commit_interval_ms"] = 60_000
        write_config(path, config)
        wait_until(lambda: channel.config.channel.batch_max_events == 5)
        produce(topic, values(200, 2, start=200))
        wait_until(lambda: len(proc.delivered) == 400)
        time.sleep(0.5)
        # The new interval holds the next commits back ...
        assert committed_offsets(zk, "g", topic) == {0: 100, 1: 100}
        config["channel"]["commit_interval_ms"] = 100
        write_config(path, config)
        # ... and a shorter one sends them when it is up, not when the minute is.
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 200, 1: 200}, timeout=10, what="re-timed")
        assert proc.calls_named("termination") == []
    assert max(sizes[-10:]) <= 5


def test_pause_and_resume_from_the_shell(tmp_path, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=2)
    path = tmp_path / "channel.yaml"
    write_config(path, base(zk_connect, kafka_config, topic))
    proc = RecordingProcessor()

    def jetkafka(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jetkafka", *args], check=False, capture_output=True, text=True, timeout=60
        )

    with InboundChannel.from_yaml(path, processor=proc) as channel:
        wait_until(lambda: len(channel.owned_partitions()) == 2)
        done = jetkafka("pause", "--config", str(path), "--reason", "maintenance")
        assert done.returncode == 0, done.stderr
        assert "paused" in done.stdout
        wait_until(lambda: channel.paused, what="paused through ZooKeeper")
        produce(topic, values(100, 2))
        time.sleep(1.0)
        assert proc.delivered == []
        assert len(channel.owned_partitions()) == 2
        # A mistyped instance id is refused as pause refuses it, not taken for "was not paused".
        missing = jetkafka("resume", "--config", str(path), "--instance", "nobody")
        assert missing.returncode == 2 and "nobody" in missing.stderr
        assert channel.paused
        done = jetkafka("resume", "--config", str(path))
        assert done.returncode == 0, done.stderr
        wait_until(lambda: len(proc.delivered) == 100)
    # A pause of an instance that does not exist is refused with the live ids.
    bad = jetkafka("pause", "--config", str(path), "--instance", "nobody")
    assert bad.returncode == 2 and "no live instance 'nobody'" in bad.stderr


def test_instance_started_while_group_paused_starts_paused(
    tmp_path, zk_connect, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    path = tmp_path / "channel.yaml"
    write_config(path, base(zk_connect, kafka_config, topic))
    produce(topic, values(10, 1))
    assert subprocess.run([sys.executable, "-m", "jetkafka", "pause", "--config", str(path)], check=False, timeout=60).returncode == 0
    proc = RecordingProcessor()
    with InboundChannel.from_yaml(path, processor=proc) as channel:
        wait_until(lambda: len(channel.owned_partitions()) == 1)
        time.sleep(1.0)
        assert proc.delivered == [] and channel.paused
        subprocess.run([sys.executable, "-m", "jetkafka", "resume", "--config", str(path)], timeout=60, check=True)
        wait_until(lambda: len(proc.delivered) == 10)


def test_a_pause_marker_removed_while_the_channel_restarts_resumes_it(
    tmp_path, zk_connect, kafka_config, topic_factory, produce
) -> None:
    """A resubscribe stops the pause watch and starts a new one; `jetkafka resume` may land in
    between. The new watch must still resume the channel, not keep it paused with no marker."""
    topic = topic_factory(partitions=1)
    path = tmp_path / "channel.yaml"
    write_config(path, base(zk_connect, kafka_config, topic))
    shell = [sys.executable, "-m", "jetkafka"]
    proc = RecordingProcessor()
    channel = InboundChannel.from_yaml(path, processor=proc)
    channel.start()
    try:
        wait_until(lambda: len(channel.owned_partitions()) == 1)
        subprocess.run([*shell, "pause", "--config", str(path)], timeout=60, check=True)
        wait_until(lambda: channel.paused, what="paused through ZooKeeper")
        channel.shutdown()  # what a resubscribe does first: stop, watch included
        subprocess.run([*shell, "resume", "--config", str(path)], timeout=60, check=True)
        produce(topic, values(10, 1))
        channel.start()  # then start again
        wait_until(lambda: len(proc.delivered) == 10, what="the events, the marker being gone")
        assert not channel.paused
    finally:
        channel.shutdown()


@pytest.fixture(autouse=True)
def _quiet_kazoo() -> None:
    logging.getLogger("kazoo").setLevel(logging.WARNING)


def test_changed_zookeeper_section_reconnects(tmp_path, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=2)
    path = tmp_path / "channel.yaml"
    config = base(zk_connect, kafka_config, topic)
    write_config(path, config)
    proc = RecordingProcessor()
    with InboundChannel.from_yaml(path, processor=proc) as channel:
        channel.watch()
        produce(topic, values(100, 2))
        wait_until(lambda: len(proc.delivered) == 100)
        assert channel._controller is not None
        old_session = channel._controller.client.client_id[0]
        config["zookeeper"]["session_timeout_s"] = 8
        write_config(path, config)
        wait_until(lambda: channel.config.zookeeper.session_timeout_s == 8, what="zookeeper change applied")
        wait_until(lambda: len(channel.owned_partitions()) == 2)
        assert channel._controller is not None
        assert channel._controller.client.client_id[0] != old_session
        produce(topic, values(100, 2, start=100))
        wait_until(lambda: len(proc.delivered) == 200)
    assert sorted(proc.ids()) == list(range(200))


def test_a_processor_whose_on_start_raises_is_rolled_back(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    """Any failure of the new configuration's start, not only jetkafka's own errors, puts the
    channel back on the configuration it ran, with its processor and its partitions."""
    from tests.support import start_gate

    topic = topic_factory(partitions=2)
    config = base(zk_connect, kafka_config, topic)
    config["processor"] = {"class": "tests.support.start_gate:StartGate", "options": {"fail_on_start": False}}
    channel = InboundChannel(parse_config(config))
    first = channel.processor
    channel.start()
    try:
        produce(topic, values(100, 2))
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 50, 1: 50}, what="the first records")
        broken = {**config, "processor": {**config["processor"], "options": {"fail_on_start": True}}}
        change = channel.reconfigure(parse_config(broken))
        assert change.kind == "rejected"
        assert channel.running and channel.processor is first
        produce(topic, values(100, 2, start=100))
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100, 1: 100}, what="records after the rollback")
    finally:
        channel.shutdown()
    mine = sorted(offset for who, offset in start_gate.DELIVERED if who == id(first))
    assert len(mine) == 200 and len(set(mine)) == 100  # offsets 0..99 of each partition, each once
    assert all(who == id(first) for who, _ in start_gate.DELIVERED)


def test_in_place_changes_keep_the_dead_letter_producer_unless_on_error_changes(
    zk_connect, kafka_config, topic_factory
) -> None:
    topic = topic_factory(partitions=1)
    config = base(zk_connect, kafka_config, topic)
    config["channel"]["on_error"] = {"mode": "dead-letter", "dead_letter_topic": f"{topic}.dlq", "max_attempts": 1}
    with InboundChannel.from_dict(config, processor=RecordingProcessor()) as channel:
        sink = channel._runner.failures.dead_letter
        assert sink is not None
        for size in (5, 6, 7):
            config["channel"]["batch_max_events"] = size
            assert channel.reconfigure(parse_config(config)).kind == "in-place"
            assert channel._runner.failures.dead_letter is sink  # no new producer, no new connections
        config["channel"]["on_error"] = {**config["channel"]["on_error"], "max_attempts": 3}
        assert channel.reconfigure(parse_config(config)).kind == "in-place"
        assert channel._runner.failures.dead_letter is not sink
        assert channel._runner.failures.config.on_error.max_attempts == 3


class BlockFirstBatch:
    """A response that blocks the first batch delivered until ``release`` is set: a batch that
    outlasts ``shutdown_timeout_s``. Called inside ``RecordingProcessor.on_next_batch``, so the
    blocked call counts as in flight for its check of one call per partition at a time."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._first = True

    def __call__(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if self._first:
            self._first = False
            self.entered.set()
            self.release.wait(60)
        return BatchResponse.advance()


def stuck_channel_config(zk_connect: str, kafka_config: dict, topic: str) -> dict[str, Any]:
    return channel_config(
        zk_connect, kafka_config, [topic], threads=1, batch_max_events=10, shutdown_timeout_s=1, rebalance_delay_ms=50
    )


def test_a_resubscribe_keeps_a_partition_whose_batch_outlasts_the_shutdown_timeout_until_it_returns(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    """The batch in hand outlasts shutdown_timeout_s while a resubscribe runs: the new start
    must not deliver the partition while the old call is still inside the processor (one call
    per partition), and nothing is lost or delivered twice: the old call's advance lands under
    the lease it was made under, the partition is released after it and taken again from there."""
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    config = stuck_channel_config(zk_connect, kafka_config, topic)
    block = BlockFirstBatch()
    proc = RecordingProcessor(block)
    channel = InboundChannel.from_dict(config, processor=proc)
    channel.start()
    try:
        assert block.entered.wait(30), "the first batch never came"
        config["channel"]["threads"] = 2
        assert channel.reconfigure(parsed(config)).kind == "resubscribe"
        time.sleep(1.5)  # a new start takes a free partition within a few hundred ms
        assert proc.violations == []
        assert len(proc.delivered) == 10, "delivered again while the first call was still running"
        assert channel.owned_partitions() == [(topic, 0)]  # still held: its owner node is kept
        block.release.set()
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="every event committed")
        assert channel.config.channel.threads == 2
    finally:
        block.release.set()
        assert channel.shutdown()
    assert proc.violations == []
    assert sorted(proc.ids()) == list(range(100)), "lost or delivered twice"
    assert [c[2] for c in proc.calls_named("termination")][:1] == [10]  # released after the call: at its end


@contextmanager
def stuck_beside_another(
    zk_connect: str, kafka_config: dict, topic: str
) -> Iterator[tuple[dict[str, Any], BlockFirstBatch, RecordingProcessor, InboundChannel, InboundChannel]]:
    """Two instances of one group (one processor, so its check sees the calls of either): the
    first holds the topic's partition with its first batch blocked, then the second joins.
    Both are shut down, and the batch released, on the way out."""
    config = stuck_channel_config(zk_connect, kafka_config, topic)
    block = BlockFirstBatch()
    proc = RecordingProcessor(block)
    first = InboundChannel.from_dict(config, processor=proc)
    second = InboundChannel.from_dict(config, processor=proc)
    first.start()
    try:
        assert block.entered.wait(30), "the first batch never came"
        second.start()
        wait_until(lambda: len(first._started_membership().registry.live()) == 2, what="both registered")
        yield config, block, proc, first, second
    finally:
        block.release.set()
        first.shutdown()
        second.shutdown()


def test_a_partition_held_over_by_a_resubscribe_goes_to_another_instance_only_after_its_call(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    """The resubscribe moves the channel to another topic; the partition whose batch is still
    running goes to another instance, but only once that batch returned (never two calls at
    once, nothing processed twice), and it does not stay in the channel's table for good: not
    in owned_partitions(), and the next shutdown does not wait for it."""
    topic, other = topic_factory(partitions=1), topic_factory(partitions=1)
    produce(topic, values(100, 1))
    with stuck_beside_another(zk_connect, kafka_config, topic) as (config, block, proc, first, second):
        moved = {**config, "channel": {**config["channel"], "topics": [other]}}
        assert first.reconfigure(parsed(moved)).kind == "resubscribe"
        time.sleep(1.5)
        assert second.owned_partitions() == [], "taken while the first instance's call was still running"
        assert len(proc.delivered) == 10 and proc.violations == []
        block.release.set()
        wait_until(lambda: second.owned_partitions() == [(topic, 0)], what="the other instance took it")
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="every event committed")
        assert first.owned_partitions() == [(other, 0)]
        assert first.shutdown(), "the shutdown waited for a partition it no longer holds"
    assert proc.violations == []
    assert sorted(proc.ids()) == list(range(100)), "lost or delivered twice"


def test_a_resubscribe_whose_new_start_fails_keeps_the_partition_held_over(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    """The new start of a resubscribe fails (a static partition the topic does not have) and
    the change is rolled back: the partition whose call outlasted the wait stays held over.
    Giving it up let another instance take it while the call still ran here (two calls at once)."""
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    with stuck_beside_another(zk_connect, kafka_config, topic) as (config, block, proc, first, second):
        bad = {**config, "channel": {**config["channel"], "coordinator": "static", "partitions": {topic: [7]}}}
        assert first.reconfigure(parsed(bad)).kind == "rejected"
        assert first.running
        time.sleep(1.5)
        assert second.owned_partitions() == [], "taken while the first instance's call was still running"
        block.release.set()
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="every event committed")
    assert proc.violations == []
    assert sorted(proc.ids()) == list(range(100)), "lost or delivered twice"


def test_a_shutdown_gives_up_a_partition_whose_batch_outlasts_it_and_a_new_start_waits_for_that_batch(
    zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    """A shutdown gives up what is still in hand after shutdown_timeout_s (its batch is read
    again by the next owner); the partition leaves owned_partitions() at once, and a start of
    the same channel object takes it only once the old call returned."""
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    block = BlockFirstBatch()
    proc = RecordingProcessor(block)
    channel = InboundChannel.from_dict(stuck_channel_config(zk_connect, kafka_config, topic), processor=proc)
    channel.start()
    try:
        assert block.entered.wait(30), "the first batch never came"
        assert not channel.shutdown()
        assert channel.owned_partitions() == []
        channel.start()
        time.sleep(1.5)
        assert len(proc.delivered) == 10 and proc.violations == [], "delivered while the old call was running"
        block.release.set()
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="every event committed")
    finally:
        block.release.set()
        channel.shutdown()
    assert proc.violations == []
    ids = proc.ids()
    assert sorted(set(ids)) == list(range(100))
    assert sorted(ids[10:20]) == list(range(10)), "the given-up batch is read again by the next owner"


def test_turning_debug_on_alone_is_in_place_and_any_other_metrics_key_restarts() -> None:
    base = {
        "zookeeper": {"connect": "127.0.0.1:1"},
        "kafka": {"bootstrap.servers": "127.0.0.1:1"},
        "channel": {"group": "g", "topics": ["t"]},
        "metrics": {"port": 9464},
    }
    old = parse_config(base)
    debug = parse_config({**base, "metrics": {"port": 9464, "debug": True}})
    both = parse_config({**base, "metrics": {"port": 9465, "debug": True}})
    assert plan_change(old, debug) == Change("in-place", ("metrics.debug",))
    assert plan_change(old, both) == Change("resubscribe", ("metrics",))

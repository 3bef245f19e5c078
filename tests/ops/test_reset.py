"""ResetOffset on a real ZooKeeper and broker: targets, exactly-once, take-over, timeouts."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from jetkafka import BatchResponse, EventBatch, PartitionSource
from jetkafka.config import JetkafkaConfig, parse_config
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.ops._protocol import ResetCommand, command_path, commands_path
from jetkafka.ops._reset import ResetError, ResetIncomplete, reset_offsets
from jetkafka.ops._targets import parse_target
from tests.support.channels import RecordingProcessor, channel_config, make_channel, wait_until

PATHS = GroupPaths("g")
HOUR_AGO_MS = int(time.time() * 1000) - 3_600_000


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat().replace("+00:00", "Z")


def produce_at(kafka_config: dict[str, Any], topic: str, records: list[tuple[int, int, int | None]]) -> None:
    """``(partition, id, timestamp ms or None for now)`` each; the value is the decimal id."""
    producer = Producer({**kafka_config, "linger.ms": 5})
    for partition, ident, ts in records:
        kwargs = {"timestamp": ts} if ts is not None else {}
        producer.produce(topic, str(ident).encode(), partition=partition, **kwargs)
    assert producer.flush(30) == 0


def config_for(zk_connect: str, kafka_config: dict[str, Any], topic: str, **channel: Any) -> JetkafkaConfig:
    return parse_config(channel_config(zk_connect, kafka_config, [topic], **channel))


def offsets(zk: KazooClient, topic: str) -> dict[int, int]:
    return OffsetStore(zk, PATHS).read_all(topic)


def markers(zk: KazooClient, command_id: str) -> dict[int, dict[str, Any]]:
    done = f"{command_path(PATHS, command_id)}/done"
    return {int(p): json.loads(zk.get(f"{done}/{p}")[0]) for p in zk.get_children(done)}


def status_of(zk: KazooClient, command_id: str) -> str:
    return str(json.loads(zk.get(command_path(PATHS, command_id))[0])["status"])


# -- targets, with no instance running (the command moves every partition itself) --------------------------


def test_targets_and_their_errors(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    # Ten records per partition, one second apart, an hour ago.
    produce_at(kafka_config, topic, [(p, i, HOUR_AGO_MS + i * 1000) for p in (0, 1) for i in range(10)])
    config = config_for(zk_connect, kafka_config, topic)

    result = reset_offsets(config, topic, "latest", command_id="to-latest")
    assert result.ok and not result.resumed
    assert {p: (r.old, r.new, r.by) for p, r in result.applied.items()} == {
        0: (None, 10, "reset-to-latest"),
        1: (None, 10, "reset-to-latest"),
    }
    assert offsets(zk, topic) == {0: 10, 1: 10}
    assert status_of(zk, "to-latest") == "done"
    assert not zk.exists(f"{commands_path(PATHS)}/lock-{topic}")

    result = reset_offsets(config, topic, iso(HOUR_AGO_MS + 4500))
    assert {p: (r.old, r.new) for p, r in result.applied.items()} == {0: (10, 5), 1: (10, 5)}
    assert reset_offsets(config, topic, "earliest").targets == {0: 0, 1: 0}
    # After the last record: the high watermark.
    assert reset_offsets(config, topic, iso(HOUR_AGO_MS + 60_000)).targets == {0: 10, 1: 10}
    assert reset_offsets(config, topic, 7, partitions=[1]).targets == {1: 7}
    assert offsets(zk, topic) == {0: 10, 1: 7}

    before = offsets(zk, topic)
    with pytest.raises(ResetError, match="is in the future"):
        reset_offsets(config, topic, iso(int(time.time() * 1000) + 3_600_000))
    with pytest.raises(ResetError, match=r"outside the log \(.*\[0\] holds 0..10"):
        reset_offsets(config, topic, 11)
    with pytest.raises(ResetError, match=r"has 2 partitions \(0..1\); --partitions names \[5\]"):
        reset_offsets(config, topic, "earliest", partitions=[5])
    with pytest.raises(ResetError, match="not earliest, latest, an offset or an ISO-8601 time"):
        reset_offsets(config, topic, "yesterday")
    with pytest.raises(ResetError, match="command id"):
        reset_offsets(config, topic, "earliest", command_id="no/slashes")
    assert offsets(zk, topic) == before


def test_a_time_before_retention_means_the_oldest_record_held(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    produce_at(kafka_config, topic, [(p, i, HOUR_AGO_MS + i * 1000) for p in (0, 1) for i in range(10)])
    admin = AdminClient(kafka_config)
    for future in admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=30).values():
        future.result(timeout=30)
    config = config_for(zk_connect, kafka_config, topic)
    result = reset_offsets(config, topic, iso(HOUR_AGO_MS - 86_400_000))
    assert result.targets == {0: 4, 1: 0}
    assert offsets(zk, topic) == {0: 4, 1: 0}


def test_a_command_id_applies_once_even_when_repeated(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    produce_at(kafka_config, topic, [(p, i, None) for p in (0, 1) for i in range(10)])
    config = config_for(zk_connect, kafka_config, topic)
    first = reset_offsets(config, topic, "earliest", command_id="once")
    reset_offsets(config, topic, "latest", command_id="later")
    assert offsets(zk, topic) == {0: 10, 1: 10}

    again = reset_offsets(config, topic, "earliest", command_id="once")
    assert again.resumed and again.ok
    assert again.applied == first.applied  # the first run's markers, nothing new
    assert offsets(zk, topic) == {0: 10, 1: 10}  # "once" did not move anything back

    with pytest.raises(ResetError, match=r"already names a reset of .* to earliest"):
        reset_offsets(config, topic, "latest", command_id="once")


def after_the_jump(seen: list[int], partition: int) -> list[int]:
    """The offsets delivered after the one move back a reset causes (all of them if none)."""
    drops = [i for i in range(1, len(seen)) if seen[i] < seen[i - 1]]
    assert len(drops) <= 1, f"partition {partition} moved back {len(drops)} times: {seen}"
    return seen[drops[0]:] if drops else seen


# -- with instances running ----------------------------------------------------------------------------------


class SlowRecorder(RecordingProcessor):
    """Records like RecordingProcessor; holds batches while ``hold`` is set."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.hold = threading.Event()
        self.released = threading.Event()
        self.released.set()

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if self.hold.is_set():
            self.released.clear()
            while self.hold.is_set():
                time.sleep(0.01)
            self.released.set()
        return super().on_next_batch(source, events)


def test_reset_to_a_time_under_load_with_two_instances(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    partitions = 4
    topic = topic_factory(partitions=partitions)
    cut_ms = HOUR_AGO_MS + 500_000
    # Ids 0..399 an hour ago, before the cut; 400..799 after it; each partition gets both.
    old = [(i % partitions, i, HOUR_AGO_MS + i) for i in range(400)]
    new = [(i % partitions, i, cut_ms + i) for i in range(400, 800)]
    produce_at(kafka_config, topic, old + new)
    recorders = [RecordingProcessor(), RecordingProcessor()]
    channels = [make_channel(zk_connect, kafka_config, topic, r, batch_max_events=20) for r in recorders]
    for channel in channels:
        channel.start()
    load = Producer({**kafka_config, "linger.ms": 5})
    produced = 0
    try:
        wait_until(lambda: all(len(c.owned_partitions()) == 2 for c in channels), what="2 partitions each")
        wait_until(lambda: offsets(zk, topic) == {p: 200 for p in range(partitions)}, what="first 800 committed")
        marks = [len(r.delivered) for r in recorders]

        import threading

        stop = threading.Event()

        def produce_load() -> None:
            nonlocal produced
            while not stop.is_set():
                for _ in range(20):
                    ident = 100_000 + produced
                    load.produce(topic, str(ident).encode(), partition=ident % partitions)
                    produced += 1
                load.poll(0)
                time.sleep(0.01)

        loader = threading.Thread(target=produce_load, daemon=True)
        loader.start()
        wait_until(lambda: produced >= 200, what="load running")
        result = reset_offsets(config_for(zk_connect, kafka_config, topic), topic, iso(cut_ms), timeout=60)
        assert result.ok
        assert result.targets == {p: 100 for p in range(partitions)}  # ids 400.. start at offset 100
        assert {r.by for r in result.applied.values()} == {c.consumer_id for c in channels}
        stop.set()
        loader.join()
        assert load.flush(30) == 0
        wait_until(
            lambda: sum(offsets(zk, topic).values()) == 800 + produced, timeout=60, what="everything committed"
        )
        for channel, recorder, mark in zip(channels, recorders, marks, strict=True):
            with recorder.lock:
                after = recorder.delivered[mark:]
            for _, p in channel.owned_partitions():
                resumed = after_the_jump([offset for _, q, offset, _ in after if q == p], p)
                assert resumed[0] == 100, f"partition {p} resumed at {resumed[0]}"
                total = 200 + sum(1 for i in range(produced) if (100_000 + i) % partitions == p)
                assert resumed == list(range(100, total)), f"partition {p}: gaps or repeats after the reset"
            ids_after = [int(v) for *_, v in after]
            assert not [i for i in ids_after if i < 400], "records from before the reset time were re-delivered"
        redelivered = {int(v) for r, m in zip(recorders, marks, strict=True) for *_, v in r.delivered[m:]}
        assert set(range(400, 800)) <= redelivered
    finally:
        for channel in channels:
            channel.shutdown()
    for recorder in recorders:
        assert not recorder.violations


def test_a_partition_taken_while_a_command_is_pending_is_reset_at_take_over(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    produce_at(kafka_config, topic, [(p, i, None) for p in (0, 1) for i in range(10)])
    zk.ensure_path(f"/consumers/g/owners/{topic}")
    # Partition 1 is held by a process that is about to die.
    doomed = KazooClient(hosts=zk_connect)
    doomed.start(timeout=10)
    doomed.create(f"/consumers/g/owners/{topic}/1", b"dying-consumer", ephemeral=True)
    recorder = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, recorder)
    channel.start()
    try:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0)], what="partition 0 taken")
        wait_until(lambda: offsets(zk, topic).get(0) == 10, what="partition 0 consumed")
        # A command whose process died right after creating it: only the instances can finish it.
        command = ResetCommand(id="orphan", topic=topic, to="offset:3", partitions=None, targets={0: 3, 1: 3})
        path = command_path(PATHS, "orphan")
        zk.create(path, command.to_json())
        zk.create(f"{path}/done")
        zk.create(f"{path}/errors")
        wait_until(lambda: 0 in markers(zk, "orphan"), what="partition 0 reset by its owner")
        assert 1 not in markers(zk, "orphan")
        doomed.stop()
        doomed.close()
        wait_until(lambda: 1 in markers(zk, "orphan"), what="partition 1 reset at take-over")
        done = markers(zk, "orphan")
        assert {p: (m["old"], m["new"], m["by"]) for p, m in done.items()} == {
            0: (10, 3, channel.consumer_id),
            1: (0, 3, channel.consumer_id),  # auto_offset_reset committed 0 at take-over
        }
        wait_until(lambda: offsets(zk, topic) == {0: 10, 1: 10}, what="both consumed to the end")
        with recorder.lock:
            seen = {p: [offset for _, q, offset, _ in recorder.delivered if q == p] for p in (0, 1)}
        assert seen[0][:10] == list(range(10))
        assert after_the_jump(seen[0], 0) == list(range(3, 10))
        # Batches from the take-over offset may run until the reset is applied; then it starts at 3.
        assert after_the_jump(seen[1], 1) == list(range(3, 10))
    finally:
        channel.shutdown()


def test_an_owner_that_cannot_apply_in_time_fails_the_command_and_a_retry_finishes_it(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    produce_at(kafka_config, topic, [(p, i, None) for p in (0, 1) for i in range(10)])
    recorder = SlowRecorder()
    channel = make_channel(zk_connect, kafka_config, topic, recorder, batch_max_events=1)
    channel.start()
    config = config_for(zk_connect, kafka_config, topic)
    try:
        wait_until(lambda: offsets(zk, topic) == {0: 10, 1: 10}, what="consumed")
        recorder.hold.set()
        produce_at(kafka_config, topic, [(0, 99, None)])  # partition 0 gets a batch that hangs
        wait_until(lambda: not recorder.released.is_set(), what="a batch in hand")
        with pytest.raises(ResetIncomplete) as caught:
            reset_offsets(config, topic, 2, timeout=3, command_id="stuck")
        result = caught.value.result
        assert set(result.applied) == {1} and set(result.pending) == {0}
        assert channel.consumer_id in result.pending[0]
        assert "did not apply it within 3 s" in result.pending[0]
        assert "--id stuck" in str(caught.value)
        assert status_of(zk, "stuck") == "aborted"
        first_marker = markers(zk, "stuck")[1]

        recorder.hold.clear()
        wait_until(lambda: offsets(zk, topic) == {0: 11, 1: 10}, what="the held batch committed")
        assert 0 not in markers(zk, "stuck")  # aborted: nobody applies it behind the operator's back

        again = reset_offsets(config, topic, 2, timeout=30, command_id="stuck")
        assert again.ok and again.resumed
        assert again.applied[0].old == 11 and again.applied[0].new == 2
        assert markers(zk, "stuck")[1] == first_marker  # done in the first run, skipped in the second
        wait_until(lambda: offsets(zk, topic) == {0: 11, 1: 10}, what="both consumed to the end")
    finally:
        recorder.hold.clear()
        channel.shutdown()


def test_parse_target() -> None:
    assert parse_target("EARLIEST").spec == "earliest"
    assert parse_target("15").spec == "offset:15"
    assert parse_target(15).spec == "offset:15"
    assert parse_target("1970-01-01T00:00:01Z").spec == "time:1000"
    assert parse_target("1970-01-01T01:00:01+01:00").spec == "time:1000"
    assert parse_target("1970-01-01 00:00:01").spec == "time:1000"  # no zone: UTC
    assert parse_target(dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.UTC)).spec == "time:2000"
    with pytest.raises(ResetError):
        parse_target(-1)


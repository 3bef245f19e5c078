"""``jetkafka status`` and ``offsets show`` against ZooKeeper and the broker, run as the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from jetkafka.config import parse_config
from jetkafka.devstack._ports import free_port
from jetkafka.ops._status import PartitionStatus, assemble_status, group_status, render_status, show_offsets
from tests.support.channels import RecordingProcessor, channel_config, make_channel, values, wait_until

REPO = Path(__file__).resolve().parents[2]


def jetkafka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetkafka", *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


def write_config(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "group.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def broker_watermarks(kafka_config: dict[str, Any], topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = Consumer({**kafka_config, "group.id": "status-test"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)}
    finally:
        consumer.close()


def zookeeper_view(zk_connect: str, topic: str) -> tuple[dict[str, dict[str, Any]], dict[int, str], dict[int, int]]:
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=10)
    try:
        # A node listed may be gone when read (a rebalance moving a partition): read again.
        for _ in range(50):
            try:
                ids = {c: json.loads(client.get(f"/consumers/g/ids/{c}")[0]) for c in client.get_children("/consumers/g/ids")}
                owners_path, offsets_path = f"/consumers/g/owners/{topic}", f"/consumers/g/offsets/{topic}"
                owners = {int(p): client.get(f"{owners_path}/{p}")[0].decode() for p in client.get_children(owners_path)}
                offsets = {int(p): int(client.get(f"{offsets_path}/{p}")[0]) for p in client.get_children(offsets_path)}
                return ids, owners, offsets
            except NoNodeError:
                time.sleep(0.1)
        raise AssertionError("the group's nodes kept changing while read")
    finally:
        client.stop()
        client.close()


def test_status_json_matches_zookeeper_and_the_broker(
    tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=3)
    produce(topic, values(30, 3))
    recorders = [RecordingProcessor(), RecordingProcessor()]
    channels = [make_channel(zk_connect, kafka_config, topic, r) for r in recorders]
    for channel in channels:
        channel.start()
    try:
        wait_until(lambda: sum(len(c.owned_partitions()) for c in channels) == 3, what="3 partitions owned")
        wait_until(lambda: sum(len(r.ids()) for r in recorders) >= 30, what="first 30 events processed")
        for channel in channels:
            channel.pause()
        wait_until(lambda: zookeeper_view(zk_connect, topic)[2] == {0: 10, 1: 10, 2: 10}, what="all 30 committed")
        produce(topic, values(9, 3, start=30))  # 3 more per partition, not processed while paused
        config = write_config(tmp_path, channel_config(zk_connect, kafka_config, [topic]))

        run = jetkafka("status", "--config", config, "--json")
        assert run.returncode == 0, run.stderr
        status = json.loads(run.stdout)

        ids, owners, offsets = zookeeper_view(zk_connect, topic)
        marks = broker_watermarks(kafka_config, topic, 3)
        assert status["group"] == "g"
        assert status["topics"] == [topic]
        assert {i["id"] for i in status["instances"]} == set(ids) == {c.consumer_id for c in channels}
        for instance in status["instances"]:
            registered = ids[instance["id"]]
            assert (instance["host"], instance["pid"], instance["started"]) == (
                registered["host"], registered["pid"], registered["started"]
            )
            assert instance["paused"] is True
            assert instance["since"].endswith("Z")
            assert instance["partitions"] == sum(1 for o in owners.values() if o == instance["id"])
        rows = {p["partition"]: p for p in status["partitions"]}
        assert sorted(rows) == [0, 1, 2]
        for p, row in rows.items():
            assert row["topic"] == topic
            assert row["owner"] == owners[p]
            assert row["committed"] == offsets[p] == 10
            assert (row["low"], row["high"]) == marks[p] == (0, 13)
            assert row["lag"] == 3
            assert row["failure"] is None
        assert status["lag"] == 9

        table = jetkafka("status", "--config", config)
        assert table.returncode == 0, table.stderr
        assert "2 instance(s), 3/3 partitions owned, total lag 9" in table.stdout
        for channel in channels:
            assert channel.consumer_id in table.stdout
        header = next(line for line in table.stdout.splitlines() if line.startswith("TOPIC"))
        assert header.split() == ["TOPIC", "PARTITION", "OWNER", "COMMITTED", "LOW", "HIGH", "LAG", "STATE"]
        assert "not moving on" not in table.stdout  # every partition moves on

        shown = jetkafka("offsets", "show", "--config", config, "--json")
        assert shown.returncode == 0, shown.stderr
        offsets_json = json.loads(shown.stdout)
        assert "instances" not in offsets_json
        assert offsets_json["partitions"] == status["partitions"]
    finally:
        for channel in channels:
            channel.resume()  # a paused partition is released only once resumed
            channel.shutdown()


def test_status_of_a_group_that_never_ran(
    tmp_path: Path,
    zk_connect: str,
    zk: KazooClient,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce: Any,
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(4, 2))
    config = parse_config(channel_config(zk_connect, kafka_config, [topic]))
    status = group_status(config)
    assert status.instances == ()
    assert [(p.partition, p.owner, p.committed, p.low, p.high, p.lag) for p in status.partitions] == [
        (0, None, None, 0, 2, None),
        (1, None, None, 0, 2, None),
    ]
    assert status.lag == 0
    assert status.exists is False and status.to_dict()["exists"] is False
    assert show_offsets(config).partitions == status.partitions

    path = write_config(tmp_path, channel_config(zk_connect, kafka_config, [topic]))
    shown = jetkafka("status", "--config", path)
    assert shown.returncode == 0, shown.stderr
    headline = shown.stdout.splitlines()[0]
    assert "does not exist in ZooKeeper" in headline and "total lag" not in headline
    assert "does not exist" in jetkafka("offsets", "show", "--config", path).stdout.splitlines()[0]

    # Once an instance has joined, the group exists; with nothing committed its lag is unknown.
    zk.ensure_path(f"/consumers/{config.channel.group}/ids")
    shown = jetkafka("status", "--config", path)
    assert "nothing committed yet, lag unknown" in shown.stdout.splitlines()[0]


def test_status_watch_redraws_until_interrupted(
    tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    import signal
    import time

    topic = topic_factory(partitions=1)
    path = write_config(tmp_path, channel_config(zk_connect, kafka_config, [topic]))
    watch = subprocess.Popen(
        [sys.executable, "-m", "jetkafka", "status", "--config", path, "--watch", "0.2"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watch.stdout is not None
        group = yaml.safe_load(Path(path).read_text())["channel"]["group"]
        headlines = 0
        deadline = time.monotonic() + 60
        while headlines < 3 and time.monotonic() < deadline:
            line = watch.stdout.readline()
            headlines += line.startswith(f"group {group}:")
        assert headlines == 3
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=30)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    assert "Traceback" not in err


def test_missing_topic_and_unreachable_zookeeper_are_one_line_errors(
    tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1)
    config = write_config(tmp_path, channel_config(zk_connect, kafka_config, [topic]))
    run = jetkafka("status", "--config", config, "--topic", "no-such-topic")
    assert run.returncode == 2
    assert "topic 'no-such-topic' does not exist" in run.stderr
    assert "Traceback" not in run.stderr

    data = channel_config(f"127.0.0.1:{free_port()}", kafka_config, [topic])
    data["zookeeper"]["connection_timeout_s"] = 1
    run = jetkafka("offsets", "show", "--config", write_config(tmp_path, data))
    assert run.returncode == 2
    assert "cannot reach ZooKeeper" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("args", [["status"], ["offsets", "show"], ["offsets", "reset", "--topic", "t", "--to", "earliest"]])
def test_config_is_required(args: list[str]) -> None:
    run = jetkafka(*args)
    assert run.returncode == 2
    assert "--config" in run.stderr


# -- the headline, without a cluster ----------------------------------------------------------


def partition(p: int, committed: int | None, high: int = 10) -> PartitionStatus:
    return PartitionStatus("t", p, None, committed, 0, high, None if committed is None else high - committed)


@pytest.mark.parametrize(
    ("exists", "committed", "headline"),
    [
        (False, [None, None], "group g: does not exist in ZooKeeper: no instance ever joined it under this chroot"),
        (True, [None, None], "group g: 0 instance(s), 0/2 partitions owned, nothing committed yet, lag unknown"),
        (True, [4, None], "group g: 0 instance(s), 0/2 partitions owned, total lag 6 (1 partition(s) never committed, not counted)"),
        (True, [4, 10], "group g: 0 instance(s), 0/2 partitions owned, total lag 6"),
    ],
)
def test_the_headline_says_when_the_lag_is_unknown(exists: bool, committed: list[int | None], headline: str) -> None:
    status = assemble_status("g", ["t"], [], [partition(p, c) for p, c in enumerate(committed)], exists=exists)
    first = render_status(status, now=0).splitlines()[0]
    assert first.startswith(headline)
    if committed == [4, 10]:
        assert first == headline
    data = status.to_dict()
    assert data["exists"] is exists and data["uncommitted"] == committed.count(None)

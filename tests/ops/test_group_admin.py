"""``jetkafka groups`` and ``offsets delete|export|import`` against ZooKeeper and the broker, run as the real CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from jetkafka.config import parse_config
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._session import zookeeper_session
from jetkafka.ops._group_admin import GroupHasMembers, _write_without_members, read_group_offsets
from tests.ops.test_status import broker_watermarks, jetkafka, write_config
from tests.support.channels import RecordingProcessor, channel_config, make_channel, values, wait_until


def set_offsets(zk: KazooClient, group: str, topic: str, offsets: dict[int, int]) -> None:
    for p, offset in offsets.items():
        path = f"/consumers/{group}/offsets/{topic}/{p}"
        zk.ensure_path(path)
        zk.set(path, str(offset).encode())


def committed(zk: KazooClient, group: str, topic: str) -> dict[int, int]:
    path = f"/consumers/{group}/offsets/{topic}"
    if zk.exists(path) is None:
        return {}
    # An offset node is created empty at its partition's first take, before its first commit.
    values = {int(p): zk.get(f"{path}/{p}")[0] for p in zk.get_children(path)}
    return {p: int(v) for p, v in values.items() if v}


def test_groups_lists_each_group_with_members_and_lag(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any],
    topic_factory: Callable[..., str], produce: Any,
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(10, 2))
    recorder = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, recorder)
    channel.start()
    try:
        wait_until(lambda: committed(zk, "g", topic) == {0: 5, 1: 5}, what="group g committed all 10")
        channel.pause()
        produce(topic, values(4, 2, start=10))  # lag 2 per partition for g
        set_offsets(zk, "idle", topic, {0: 1, 1: 4})
        set_offsets(zk, "orphan", "no-such-topic", {0: 3})
        config = write_config(tmp_path, channel_config(zk_connect, kafka_config, [topic], group="not-listed-by-name"))
        marks = broker_watermarks(kafka_config, topic, 2)
        assert {p: m[1] for p, m in marks.items()} == {0: 7, 1: 7}

        run = jetkafka("groups", "--config", config, "--json")
        assert run.returncode == 0, run.stderr
        groups = {g["group"]: g for g in json.loads(run.stdout)["groups"]}
        assert sorted(groups) == ["g", "idle", "orphan"]
        assert [m["id"] for m in groups["g"]["members"]] == [channel.consumer_id]
        assert groups["g"]["topics"] == [topic]
        assert groups["g"]["partitions"] == 2
        assert groups["g"]["lag"] == 4
        assert groups["idle"]["members"] == []
        assert groups["idle"]["lag"] == (7 - 1) + (7 - 4)
        assert groups["idle"]["missing_topics"] == []
        assert groups["orphan"]["topics"] == groups["orphan"]["missing_topics"] == ["no-such-topic"]
        assert (groups["orphan"]["partitions"], groups["orphan"]["lag"]) == (1, 0)

        table = jetkafka("groups", "--config", config)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split() == ["GROUP", "MEMBERS", "TOPICS", "PARTITIONS", "LAG", "MEMBER", "IDS"]
        assert lines[1].split() == ["g", "1", topic, "2", "4", channel.consumer_id]
        assert lines[2].split() == ["idle", "0", topic, "2", "9", "-"]
        assert lines[3].split() == ["orphan", "0", "no-such-topic", "1", "0", "-"]
        assert "note: group orphan: topic(s) no-such-topic not on the brokers; their lag is not counted" in lines

        no_lag = jetkafka("groups", "--config", config, "--json", "--no-lag")
        assert [g["lag"] for g in json.loads(no_lag.stdout)["groups"]] == [None, None, None]
    finally:
        channel.resume()
        channel.shutdown()


def test_offsets_delete_is_refused_with_members_and_done_without(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any],
    topic_factory: Callable[..., str], produce: Any,
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(6, 2))
    channel = make_channel(zk_connect, kafka_config, topic, RecordingProcessor())
    config = write_config(tmp_path, channel_config(zk_connect, kafka_config, [topic]))
    channel.start()
    try:
        wait_until(lambda: committed(zk, "g", topic) == {0: 3, 1: 3}, what="group g committed all 6")
        refused = jetkafka("offsets", "delete", "--config", config)
        assert refused.returncode == 2
        assert "group g has 1 member(s)" in refused.stderr
        assert channel.consumer_id in refused.stderr
        assert "nothing was changed" in refused.stderr
        assert committed(zk, "g", topic) == {0: 3, 1: 3}
        dry_refused = jetkafka("offsets", "delete", "--config", config, "--dry-run")
        assert dry_refused.returncode == 2 and channel.consumer_id in dry_refused.stderr
    finally:
        channel.shutdown()
    wait_until(lambda: zk.get_children("/consumers/g/ids") == [], what="the member gone")
    ids_acl = zk.get_acls("/consumers/g/ids")[0]

    dry = jetkafka("offsets", "delete", "--config", config, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] is True
    assert plan["changes"] == [
        {"topic": topic, "partition": 0, "old": 3, "new": None},
        {"topic": topic, "partition": 1, "old": 3, "new": None},
    ]
    assert committed(zk, "g", topic) == {0: 3, 1: 3}

    done = jetkafka("offsets", "delete", "--config", config)
    assert done.returncode == 0, done.stderr
    assert "deleted 2 committed offset(s) of group g" in done.stdout
    assert zk.exists(f"/consumers/g/offsets/{topic}") is None
    # The ids node is back, as it was: members register under it as before.
    assert zk.get_children("/consumers/g/ids") == []
    assert zk.get_acls("/consumers/g/ids")[0] == ids_acl

    again = make_channel(zk_connect, kafka_config, topic, RecordingProcessor())
    again.start()
    try:
        wait_until(lambda: len(zk.get_children("/consumers/g/ids")) == 1, what="a new member registered")
    finally:
        again.shutdown()


def test_a_member_registering_during_the_write_aborts_it(zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any]) -> None:
    """The check and the write are one transaction: a member registering after the check still stops it."""
    set_offsets(zk, "g", "t", {0: 10})
    paths = GroupPaths("g")
    config = parse_config(channel_config(zk_connect, kafka_config, ["t"]))

    def member_registers_then_delete(tx: Any) -> None:
        zk.create(paths.consumer("late-member"), json.dumps({"host": "h", "pid": 1, "started": 0}).encode(), ephemeral=True)
        tx.delete(paths.offset("t", 0))

    with zookeeper_session(config.zookeeper) as client:
        with pytest.raises(GroupHasMembers, match="late-member"):
            _write_without_members(client, "g", "offsets delete changes", member_registers_then_delete)
        assert read_group_offsets(client, "g") == {"t": {0: 10}}
    assert zk.get_children(paths.ids) == ["late-member"]


def test_export_then_import_into_another_group_round_trips(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    first, second = topic_factory(partitions=3), topic_factory(partitions=1)
    set_offsets(zk, "g", first, {0: 5, 1: 0, 2: 17})
    set_offsets(zk, "g", second, {0: 42})
    set_offsets(zk, "copy", first, {0: 99})  # overwritten by the import
    config = write_config(tmp_path, channel_config(zk_connect, kafka_config, [first]))
    exported = tmp_path / "g.json"

    run = jetkafka("offsets", "export", "--config", config, "--output", str(exported))
    assert run.returncode == 0, run.stderr
    data = json.loads(exported.read_text())
    assert (data["format"], data["version"], data["group"]) == ("jetkafka-offsets", 1, "g")
    assert sorted((o["topic"], o["partition"], o["offset"]) for o in data["offsets"]) == sorted(
        [(first, 0, 5), (first, 1, 0), (first, 2, 17), (second, 0, 42)]
    )

    dry = jetkafka("offsets", "import", str(exported), "--config", config, "--group", "copy", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    changes = {(c["topic"], c["partition"]): (c["old"], c["new"]) for c in json.loads(dry.stdout)["changes"]}
    assert changes[(first, 0)] == (99, 5)
    assert changes[(second, 0)] == (None, 42)
    assert committed(zk, "copy", first) == {0: 99}

    imported = jetkafka("offsets", "import", str(exported), "--config", config, "--group", "copy")
    assert imported.returncode == 0, imported.stderr
    assert "wrote 4 offset(s)" in imported.stdout and "into group copy" in imported.stdout

    back = jetkafka("offsets", "export", "--config", config, "--group", "copy")
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["offsets"] == data["offsets"]
    assert json.loads(back.stdout)["group"] == "copy"


def test_import_refuses_an_invalid_file_and_a_group_with_members(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1)
    config = write_config(tmp_path, channel_config(zk_connect, kafka_config, [topic]))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "jetkafka-offsets", "version": 1, "group": "g", "offsets": [{"topic": topic}]}))
    run = jetkafka("offsets", "import", str(bad), "--config", config)
    assert run.returncode == 2
    assert "offsets[0].offset: missing" in run.stderr and "offsets[0].partition: missing" in run.stderr
    assert zk.exists("/consumers/g/offsets") is None

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"format": "jetkafka-offsets", "version": 1, "group": "x", "offsets": [
        {"topic": topic, "partition": 0, "offset": 1}
    ]}))
    channel = make_channel(zk_connect, kafka_config, topic, RecordingProcessor())
    channel.start()
    try:
        wait_until(lambda: len(channel.owned_partitions()) == 1, what="the partition owned")
        refused = jetkafka("offsets", "import", str(good), "--config", config)
        assert refused.returncode == 2
        assert channel.consumer_id in refused.stderr and "nothing was changed" in refused.stderr
    finally:
        channel.shutdown()

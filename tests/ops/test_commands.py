"""The ``status`` and ``offsets`` subcommands as a user runs them (jetkafka.ops._commands):
what needs no cluster, and ``offsets reset`` without ``--topic`` and with ``--all-topics``."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import yaml
from kazoo.client import KazooClient

from jetkafka.cli import main
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.ops._history import read_history
from tests.support.channels import channel_config, values


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_a_reset_of_a_topic_the_channel_does_not_read_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                # Nothing listens there: the warning comes before the command connects.
                "zookeeper": {"connect": "127.0.0.1:1", "connection_timeout_s": 0.5},
                "kafka": {"bootstrap.servers": "127.0.0.1:1"},
                "channel": {"group": "orders", "topics": ["orders", "refunds"]},
            }
        )
    )
    for topic, warned in (("payments", True), ("orders", False)):
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = main(["offsets", "reset", "--config", str(path), "--topic", topic, "--to", "earliest", "--dry-run"])
        assert code == 2 and "cannot reach ZooKeeper" in err.getvalue()
        warning = (
            f"jetkafka: warning: topic payments is not in channel.topics (orders, refunds) of {path}: "
            "no instance of group orders reads it"
        )
        assert (warning in err.getvalue()) is warned, err.getvalue()


def unreachable_group(tmp_path: Path, topics: list[str]) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                # Nothing listens there: each refusal below comes before the command connects.
                "zookeeper": {"connect": "127.0.0.1:1", "connection_timeout_s": 0.5},
                "kafka": {"bootstrap.servers": "127.0.0.1:1"},
                "channel": {"group": "orders", "topics": topics},
            }
        )
    )
    return path


def test_a_reset_of_a_group_of_several_topics_needs_topic_or_all_topics(tmp_path: Path) -> None:
    path = str(unreachable_group(tmp_path, ["orders", "refunds"]))
    code, _, err = cli("offsets", "reset", "--config", path, "--to", "earliest")
    assert code == 2
    assert err == (
        "jetkafka: error: group orders consumes 2 topics (orders, refunds): name the one to move with --topic T "
        "(e.g. --topic orders), or move them all with --all-topics\n"
    )
    code, _, err = cli("offsets", "reset", "--config", path, "--to", "earliest", "--all-topics", "--partitions", "0")
    assert code == 2 and "--partitions names partitions of one topic, and this moves 2 (orders, refunds)" in err
    code, _, err = cli("offsets", "reset", "--config", path, "--undo", "x", "--all-topics")
    assert code == 2 and "drop --all-topics" in err


def group_file(tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topics: list[str]) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(channel_config(zk_connect, kafka_config, topics)))
    return str(path)


def test_a_group_of_one_topic_is_reset_without_topic(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(10, 2))
    path = group_file(tmp_path, zk_connect, kafka_config, [topic])
    store = OffsetStore(zk, GroupPaths("g"))

    code, out, err = cli("offsets", "reset", "--config", path, "--to", "latest", "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert (plan["topic"], [(m["partition"], m["new"]) for m in plan["partitions"]]) == (topic, [(0, 5), (1, 5)])
    assert store.read_all(topic) == {}

    code, out, err = cli("offsets", "reset", "--config", path, "--to", "latest", "--id", "one")
    assert code == 0, err
    assert f"reset one (started): {topic} to latest" in out
    assert store.read_all(topic) == {0: 5, 1: 5}
    assert [(e.command_id, e.topic) for e in read_history(zk, GroupPaths("g"))] == [("one", topic)]

    code, out, err = cli("offsets", "reset", "--config", path, "--shift-by", "-2")
    assert code == 0, err
    assert store.read_all(topic) == {0: 3, 1: 3}


def test_all_topics_moves_each_topic_and_is_undone_as_one(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    first, second = topic_factory(partitions=1), topic_factory(partitions=2)
    produce(first, values(4, 1))
    produce(second, values(6, 2))
    path = group_file(tmp_path, zk_connect, kafka_config, [first, second])
    store = OffsetStore(zk, GroupPaths("g"))

    code, out, err = cli("offsets", "reset", "--config", path, "--all-topics", "--to", "latest", "--dry-run", "--json")
    assert code == 0, err
    plans = json.loads(out)
    assert plans["dry_run"] is True
    assert [(p["topic"], [m["new"] for m in p["partitions"]]) for p in plans["plans"]] == [(first, [4]), (second, [3, 3])]

    # Offsets to go back to (an undo cannot restore "none committed").
    assert cli("offsets", "reset", "--config", path, "--all-topics", "--to", "1", "--id", "start")[0] == 0
    assert (store.read_all(first), store.read_all(second)) == ({0: 1}, {0: 1, 1: 1})

    code, out, err = cli("offsets", "reset", "--config", path, "--all-topics", "--to", "latest", "--id", "all")
    assert code == 0, err
    assert f"reset all.{first} (started): {first} to latest" in out and f"reset all.{second} (started)" in out
    assert "undo them together with: jetkafka offsets reset --undo all" in out
    assert (store.read_all(first), store.read_all(second)) == ({0: 4}, {0: 3, 1: 3})
    history = read_history(zk, GroupPaths("g"))
    assert [(e.command_id, e.topic, e.status) for e in history][2:] == [
        (f"all.{first}", first, "done"),
        (f"all.{second}", second, "done"),
    ]

    # Repeating the command with its id finds both parts done and moves nothing again.
    code, out, err = cli("offsets", "reset", "--config", path, "--all-topics", "--to", "latest", "--id", "all", "--json")
    assert code == 0, err
    again = json.loads(out)
    assert again["command_id"] == "all" and [r["resumed"] for r in again["resets"]] == [True, True]
    assert len(read_history(zk, GroupPaths("g"))) == 4

    code, out, err = cli("offsets", "reset", "--config", path, "--undo", "all", "--dry-run")
    assert code == 0, err
    assert f"dry run, nothing changed: {first} to " in out and f"dry run, nothing changed: {second} to " in out
    assert (store.read_all(first), store.read_all(second)) == ({0: 4}, {0: 3, 1: 3})

    # Only one topic's part: the other stays where the reset put it.
    code, out, err = cli("offsets", "reset", "--config", path, "--undo", "all", "--topic", second, "--id", "back")
    assert code == 0, err
    assert f"reset back.{second} (started)" in out
    assert (store.read_all(first), store.read_all(second)) == ({0: 4}, {0: 1, 1: 1})
    code, out, err = cli("offsets", "reset", "--config", path, "--undo", "all")
    assert code == 0, err
    assert (store.read_all(first), store.read_all(second)) == ({0: 1}, {0: 1, 1: 1})
    code, _, err = cli("offsets", "reset", "--config", path, "--undo", "all", "--topic", "nope")
    assert code == 2 and f"reset all moved topics {first}, {second}, not nope" in err


def test_an_all_topics_reset_cut_short_is_continued_with_its_own_id(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    from jetkafka.coordination._ownership import PartitionOwnership

    first, second = topic_factory(partitions=1), topic_factory(partitions=1)
    produce(first, values(4, 1))
    produce(second, values(4, 1))
    path = group_file(tmp_path, zk_connect, kafka_config, [first, second])
    # An owner that never applies the command (no instance behind it): the second topic times out.
    owner = PartitionOwnership(zk, GroupPaths("g"), "silent-1")
    owner.prepare(second)
    lease = owner.take(second, 0)
    assert lease is not None

    code, out, err = cli("offsets", "reset", "--config", path, "--all-topics", "--to", "latest", "--id", "cut", "--timeout", "1")
    assert code == 1
    assert f"reset cut.{first} (started)" in out and f"reset cut.{second} (started)" in out
    assert "fix: repeat the same command with --id cut to finish it" in err, err
    assert f"--id cut.{second}" not in err

    owner.release(lease)
    code, out, err = cli("offsets", "reset", "--config", path, "--all-topics", "--to", "latest", "--id", "cut")
    assert code == 0, err
    assert f"reset cut.{first} (continued)" in out and f"reset cut.{second} (continued)" in out
    store = OffsetStore(zk, GroupPaths("g"))
    assert (store.read_all(first), store.read_all(second)) == ({0: 4}, {0: 4})

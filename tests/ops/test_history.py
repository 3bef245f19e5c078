"""The offsets history: what it records, its bound, and ``--undo`` on a running group."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from jetkafka.cli import main
from jetkafka.coordination._paths import GroupPaths
from jetkafka.ops._history import HISTORY_LIMIT, HistoryEntry, history_path, read_history, write_entry
from jetkafka.ops._protocol import PartitionReset
from jetkafka.ops._reset import reset_offsets
from tests.ops.test_plan import config_file
from tests.ops.test_reset import PATHS, config_for, markers, offsets, produce_at, status_of
from tests.support.channels import RecordingProcessor, make_channel, wait_until


def test_the_history_keeps_the_newest_entries(zk: KazooClient) -> None:
    paths = GroupPaths("history-bound")
    for i in range(HISTORY_LIMIT + 5):
        write_entry(zk, paths, HistoryEntry(f"r{i}", "t", "latest", "done", {0: PartitionReset(0, i, i + 1, "x")}))
    entries = read_history(zk, paths)
    assert [e.command_id for e in entries] == [f"r{i}" for i in range(5, HISTORY_LIMIT + 5)]
    assert entries[-1].partitions[0] == PartitionReset(0, HISTORY_LIMIT + 4, HISTORY_LIMIT + 5, "x")
    assert "@" in entries[0].who and entries[0].pid > 0
    zk.delete(paths.root, recursive=True)


def test_an_applied_reset_is_listed_and_undone_while_the_group_runs(
    zk: KazooClient,
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = topic_factory(partitions=2)
    config = config_for(zk_connect, kafka_config, topic)
    path = config_file(tmp_path, zk_connect, kafka_config, topic)
    produce_at(kafka_config, topic, [(p, i, None) for p in (0, 1) for i in range(10)])
    first = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, first)
    channel.start()
    try:
        wait_until(lambda: offsets(zk, topic) == {0: 10, 1: 10}, what="first ten of each partition consumed")
    finally:
        channel.shutdown()

    # While the group is down, ten more records each arrive and a reset to latest skips them.
    produce_at(kafka_config, topic, [(p, i, None) for p in (0, 1) for i in range(10, 20)])
    skipped = reset_offsets(config, topic, "latest", command_id="skip-ahead")
    assert {p: (r.old, r.new) for p, r in skipped.applied.items()} == {0: (10, 20), 1: (10, 20)}

    capsys.readouterr()
    assert main(["offsets", "history", "--config", path, "--topic", topic, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["entries"]
    assert len(listed) == 1
    entry = listed[0]
    assert (entry["id"], entry["kind"], entry["topic"], entry["to"], entry["status"]) == (
        "skip-ahead", "reset", topic, "latest", "done"
    )
    assert "@" in entry["who"] and entry["pid"] > 0
    assert {p: (v["old"], v["new"]) for p, v in entry["partitions"].items()} == {"0": (10, 20), "1": (10, 20)}
    assert status_of(zk, "skip-ahead") == "done"

    recorder = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, recorder)
    channel.start()
    try:
        wait_until(lambda: len(channel.owned_partitions()) == 2, what="both partitions held")
        assert offsets(zk, topic) == {0: 20, 1: 20} and not recorder.delivered

        assert main(["offsets", "reset", "--config", path, "--undo", "skip-ahead", "--id", "undo-skip"]) == 0
        out = capsys.readouterr().out
        assert f"{topic} to undo of skip-ahead" in out
        # Applied by the running instance, through the fenced, once-only protocol.
        assert {p: (m["old"], m["new"], m["by"]) for p, m in markers(zk, "undo-skip").items()} == {
            p: (20, 10, channel.consumer_id) for p in (0, 1)
        }
        wait_until(lambda: offsets(zk, topic) == {0: 20, 1: 20}, what="the skipped records consumed")
        # Each skipped record is processed exactly once; none of the first ten again.
        delivered = sorted((p, o) for _, p, o, _ in recorder.delivered)
        assert delivered == [(p, o) for p in (0, 1) for o in range(10, 20)]

        # Repeating the undo's id does not move anything again.
        assert main(["offsets", "reset", "--config", path, "--undo", "skip-ahead", "--id", "undo-skip"]) == 0
        assert offsets(zk, topic) == {0: 20, 1: 20}
    finally:
        channel.shutdown()
    assert not recorder.violations

    capsys.readouterr()
    assert main(["offsets", "history", "--config", path, "--topic", topic]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert "skip-ahead" in lines[0] and f"{topic} to latest  done" in lines[0]
    assert lines[1].strip() == "[0] 10 -> 20, [1] 10 -> 20"
    assert "undo-skip" in lines[2] and "undo of skip-ahead  done" in lines[2]
    assert lines[3].strip() == "[0] 20 -> 10, [1] 20 -> 10"
    undo = [e for e in read_history(zk, PATHS, [topic]) if e.command_id == "undo-skip"]
    assert len(undo) == 1 and undo[0].kind == "undo" and undo[0].undoes == "skip-ahead"
    assert zk.exists(history_path(PATHS))


def test_undo_checks_what_it_is_given(
    zk: KazooClient,
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = topic_factory(partitions=2)
    other = topic_factory(partitions=1)
    produce_at(kafka_config, topic, [(p, i, None) for p in (0, 1) for i in range(5)])
    config = config_for(zk_connect, kafka_config, topic)
    path = config_file(tmp_path, zk_connect, kafka_config, topic)
    reset_offsets(config, topic, "latest", command_id=f"first-{topic}")  # nothing committed before it

    assert main(["offsets", "reset", "--config", path, "--undo", f"first-{topic}"]) == 2
    assert "had no committed offset before reset" in capsys.readouterr().err
    assert main(["offsets", "reset", "--config", path, "--undo", f"first-{topic}", "--topic", other]) == 2
    assert f"moved topic {topic}, not {other}" in capsys.readouterr().err
    # The group's one topic needs no --topic.
    assert main(["offsets", "reset", "--config", path, "--to", "latest", "--dry-run"]) == 0
    assert f"dry run, nothing changed: {topic} to latest" in capsys.readouterr().out
    assert offsets(zk, topic) == {0: 5, 1: 5}

    reset_offsets(config, topic, 2, command_id=f"second-{topic}")
    assert main(["offsets", "reset", "--config", path, "--undo", f"second-{topic}", "--partitions", "1"]) == 0
    assert offsets(zk, topic) == {0: 2, 1: 5}  # only partition 1 is put back

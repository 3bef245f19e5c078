"""``offsets reset --dry-run``: the plan a reset would apply, on a running group; nothing changes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kazoo.client import KazooClient

from jetkafka.cli import main
from jetkafka.ops._history import history_path
from jetkafka.ops._plan import THIS_COMMAND
from jetkafka.ops._protocol import commands_path
from tests.ops.test_reset import PATHS, offsets, produce_at
from tests.support.channels import RecordingProcessor, channel_config, make_channel, wait_until


def config_file(tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topic: str) -> str:
    path = tmp_path / "group.yaml"
    path.write_text(yaml.safe_dump(channel_config(zk_connect, kafka_config, [topic])))
    return str(path)


def reset_nodes(zk: KazooClient) -> list[str]:
    return sorted(n for n in zk.get_children(commands_path(PATHS)) if n.startswith("reset-")) if zk.exists(commands_path(PATHS)) else []


def history_nodes(zk: KazooClient) -> list[str]:
    return sorted(zk.get_children(history_path(PATHS))) if zk.exists(history_path(PATHS)) else []


def test_dry_run_prints_the_plan_and_changes_nothing(
    zk: KazooClient,
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = topic_factory(partitions=2)
    produce_at(kafka_config, topic, [(p, i, None) for p in (0, 1) for i in range(10)])
    path = config_file(tmp_path, zk_connect, kafka_config, topic)
    recorder = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, recorder)
    channel.start()
    try:
        wait_until(lambda: offsets(zk, topic) == {0: 10, 1: 10}, what="consumed to the end")
        commands_before, history_before, delivered = reset_nodes(zk), history_nodes(zk), len(recorder.delivered)
        capsys.readouterr()

        argv = ["offsets", "reset", "--config", path, "--topic", topic, "--shift-by", "-6", "--dry-run"]
        assert main([*argv, "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        assert plan["dry_run"] and plan["topic"] == topic and plan["to"] == "shift by -6"
        assert [(r["partition"], r["old"], r["new"], r["by"], r["note"]) for r in plan["partitions"]] == [
            (p, 10, 4, channel.consumer_id, None) for p in (0, 1)
        ]

        assert main(argv) == 0
        text = capsys.readouterr().out
        assert text.startswith(f"dry run, nothing changed: {topic} to shift by -6")
        assert f"0   10    4  {channel.consumer_id}" in text

        assert main([*argv[:-3], "--shift-by", "-100", "--partitions", "1", "--dry-run"]) == 0
        text = capsys.readouterr().out
        assert "note: partition 1: -90 is before the log start: clamped to 0" in text

        time.sleep(1.0)  # an applied reset would be under way by now
        assert offsets(zk, topic) == {0: 10, 1: 10}
        assert reset_nodes(zk) == commands_before and history_nodes(zk) == history_before
        assert len(recorder.delivered) == delivered
    finally:
        channel.shutdown()

    # With no instance running, the command itself would apply every partition.
    assert main(["offsets", "reset", "--config", path, "--topic", topic, "--to", "earliest", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [(r["old"], r["new"], r["by"]) for r in plan["partitions"]] == [(10, 0, THIS_COMMAND)] * 2
    assert offsets(zk, topic) == {0: 10, 1: 10}


def test_dry_run_refuses_what_the_reset_would_refuse(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = topic_factory(partitions=2)
    path = config_file(tmp_path, zk_connect, kafka_config, topic)
    assert main(["offsets", "reset", "--config", path, "--topic", topic, "--to", "5", "--dry-run"]) == 2
    assert "offset 5 is outside the log" in capsys.readouterr().err
    assert main(["offsets", "reset", "--config", path, "--topic", topic, "--shift-by", "-1", "--dry-run"]) == 2
    assert "have none" in capsys.readouterr().err
    assert main(["offsets", "reset", "--config", path, "--undo", "no-such-reset", "--dry-run"]) == 2
    assert "no reset no-such-reset in the history" in capsys.readouterr().err

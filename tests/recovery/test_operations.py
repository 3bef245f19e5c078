"""What operators see and do: `jetkafka recovery list|cancel`, max_records, ranges out of retention."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from jetkafka.cli import main
from tests.recovery import Recorder
from tests.recovery.test_backlog import backlog, node_ranges, recovering_channel
from tests.support.channels import channel_config, wait_until


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_list_then_cancel_while_an_instance_recovers(
    zk: KazooClient,
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = topic_factory(partitions=2)
    backlog(zk, produce, topic, 2, 10_000)  # gaps of 9 000; max_records keeps the newest 6 000
    live, rec = Recorder(False), Recorder(True)
    channel = recovering_channel(
        zk_connect, kafka_config, topic, live, rec, max_partition_lag=1000, max_records=6000, max_rate=400,
        batch_max_events=100,
    )
    config = tmp_path / "group.yaml"
    config.write_text(yaml.safe_dump(channel_config(zk_connect, kafka_config, [topic])))
    channel.start()
    try:
        wait_until(lambda: len(rec.offsets()) >= 400, 20, "recovery under way")
        code, out = run_cli(capsys, "recovery", "list", "--config", str(config), "--json")
        assert code == 0
        listed = json.loads(out)
        assert [(p["topic"], p["partition"]) for p in listed["partitions"]] == [(topic, 0), (topic, 1)]
        for p in listed["partitions"]:
            assert p["owner"] == channel.consumer_id
            assert p["capped"] == 3000  # [0, 3000) is left out: the gap's oldest part
            assert p["ranges"][-1][1] == 9000 and p["ranges"][0][0] >= 3000
            assert p["remaining"] == 9000 - p["ranges"][0][0] and p["lost"] == 0
        assert listed["remaining"] == sum(p["remaining"] for p in listed["partitions"])
        figures = channel.stats.partition((topic, 0))
        assert figures.recovery_lost == {"max_records": 3000}
        assert any("recovery.max_records 6000" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
        code, out = run_cli(capsys, "recovery", "list", "--config", str(config))
        assert "REMAINING" in out and "[3" in out and channel.consumer_id in out

        code, out = run_cli(capsys, "recovery", "cancel", "--config", str(config), "--partitions", "0")
        assert code == 0
        assert out.splitlines()[-1].startswith("cancelled: ") and "in 1 partition(s) will not be recovered" in out
        cancelled = int(out.splitlines()[-1].split()[1])
        assert 0 < cancelled <= 6000
        assert node_ranges(zk, topic, 0) is None and node_ranges(zk, topic, 1) is not None
        at_cancel = len(rec.offsets(partition=0))
        wait_until(lambda: len(rec.offsets(partition=1)) >= 2000, 30, "partition 1 still recovering")
        after = len(rec.offsets(partition=0))
        assert after - at_cancel <= 100, "after a cancel at most the batch in hand is processed"
        # Recovered and stored + cancelled is the whole range; the batch in hand at the cancel may
        # have been processed on top.
        assert 6000 <= after + cancelled <= 6100, (after, cancelled)

        code, out = run_cli(capsys, "recovery", "cancel", "--config", str(config), "--json")
        result = json.loads(out)
        assert [p["partition"] for p in result["partitions"]] == [1] and result["cancelled"] > 0
        wait_until(lambda: channel.stats.partition((topic, 1)).recovery_remaining is None, 10, "worker let go")
        code, out = run_cli(capsys, "recovery", "list", "--config", str(config))
        assert out.startswith("group g: 0 partition(s) with recovery ranges, 0 events to recover")
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR and "max_records" not in r.getMessage()]
    finally:
        channel.shutdown()
    assert not rec.violations and not live.violations


def test_ranges_out_of_retention_are_trimmed_and_counted_as_lost(
    zk: KazooClient,
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = topic_factory(partitions=1)
    backlog(zk, produce, topic, 1, 6000)  # gap [0, 5000)
    live, rec = Recorder(False), Recorder(True)
    channel = recovering_channel(zk_connect, kafka_config, topic, live, rec, max_partition_lag=1000, max_rate=5000)
    channel.pause(topic, 0)  # taken paused: the gap is recorded, nothing is read yet
    channel.start()
    try:
        wait_until(lambda: channel.stats.partition((topic, 0)).recovery_remaining == 5000, 20, "gap recorded")
        admin = AdminClient(dict(kafka_config))
        for future in admin.delete_records([TopicPartition(topic, 0, 2000)]).values():
            future.result(timeout=30)  # retention took offsets below 2000
        channel.resume(topic, 0)
        wait_until(lambda: node_ranges(zk, topic, 0) is None, 30, "the rest recovered")
        wait_until(lambda: len(live.offsets()) == 1000, 10, "live processed")
        assert sorted(rec.offsets()) == list(range(2000, 5000))
        assert channel.stats.partition((topic, 0)).recovery_lost == {"retention": 2000}
        lost = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "LOST" in r.getMessage()]
        assert lost and "2000 events to recover are no longer on the broker" in lost[0], lost
    finally:
        channel.shutdown()


def test_cli_reports_an_unreadable_node_and_leaves_it_alone(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "group.yaml"
    config.write_text(yaml.safe_dump(channel_config(zk_connect, kafka_config, ["orders"])))
    zk.create("/consumers/g/recovery/orders/2", b'{"ranges": [[9, 3]]}', makepath=True)
    zk.create("/consumers/g/recovery/orders/5", b'{"ranges": [[0, 10], [20, 25]], "lost": 1}', makepath=True)
    code, out = run_cli(capsys, "recovery", "list", "--config", str(config), "--json")
    listed = {p["partition"]: p for p in json.loads(out)["partitions"]}
    assert code == 0 and listed[2]["error"] and "malformed recovery node" in listed[2]["error"]
    assert (listed[5]["remaining"], listed[5]["lost"], listed[5]["owner"], listed[5]["error"]) == (15, 1, None, None)
    code, out = run_cli(capsys, "recovery", "cancel", "--config", str(config))
    assert "orders[2]: left alone" in out and "orders[5]: cancelled 15 events in 2 range(s): [0, 10) [20, 25)" in out
    assert out.splitlines()[-1] == "cancelled: 15 events in 1 partition(s) will not be recovered"
    assert zk.get("/consumers/g/recovery/orders/2")[0] == b'{"ranges": [[9, 3]]}'
    assert not zk.exists("/consumers/g/recovery/orders/5")
    code = main(["recovery", "list", "--config", str(config), "--topic", "nope"])
    assert code == 2 and "not in channel.topics" in capsys.readouterr().err

"""docs/embedding.md stays true to the code: its hot-deploy table and the fields it documents.

The table of settings applied in place or by a restart is read from the page and compared with
what :func:`jetkafka.channel._hot_deploy.plan_change` decides for every setting; the field
tables are compared with the dataclasses and dicts they describe, so a field added, renamed or
removed in the code fails here until the page says so.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from jetkafka import InboundChannel, PartitionSnapshot
from jetkafka.channel._hot_deploy import IN_PLACE_CHANNEL_KEYS, IN_PLACE_SECTIONS, plan_change
from jetkafka.channel._stats import ChannelStats, PartitionFigures
from jetkafka.config import JetkafkaConfig, parse_config
from jetkafka.config._schema import ChannelConfig
from jetkafka.ops._metrics import ChannelView, PartitionView
from tests.support.channels import RecordingProcessor

BASE = {
    "zookeeper": {"connect": "zk:2181"},
    "kafka": {"bootstrap.servers": "k:9092"},
    "channel": {"group": "g", "topics": ["t"]},
}
PAGE = Path(__file__).resolve().parents[1] / "docs" / "embedding.md"
_ROW = re.compile(r"^\|\s*(?P<names>[^|]+?)\s*\|\s*(?P<rest>.*)\|\s*$")


def table(header: str) -> dict[str, str]:
    """The rows of the page's table whose first header cell is ``header``: each backticked name
    of a row's first cell, mapped to the row's second cell."""
    lines = PAGE.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(rf"^\|\s*{re.escape(header)}\s*\|", line)]
    assert len(starts) == 1, f"one table headed {header!r} in {PAGE.name}, found {len(starts)}"
    rows: dict[str, str] = {}
    for line in lines[starts[0] + 2 :]:
        match = _ROW.match(line)
        if match is None:
            break
        second = match["rest"].split("|")[0].strip()
        for name in re.findall(r"`([^`]+)`", match["names"]):
            assert name not in rows, f"{name} twice in the table {header!r}"
            rows[name] = second
    return rows


def field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_the_hot_deploy_table_lists_every_setting_as_the_code_applies_it() -> None:
    # A row reads "in place" or "restart", possibly followed by a remark in parentheses.
    documented = {name: kind.split(" (")[0] for name, kind in table("setting").items()}
    expected = {
        f"channel.{name}": "in place" if name in IN_PLACE_CHANNEL_KEYS else "restart"
        for name in field_names(ChannelConfig)
    }
    expected.update(
        (name, "in place" if name in IN_PLACE_SECTIONS else "restart")
        for name in field_names(JetkafkaConfig) - {"channel", "source"}
    )
    assert documented == expected


def test_plan_change_agrees_with_the_table_for_two_real_edits() -> None:
    # The table is read from the sets plan_change uses; this ties the sets to its decisions.
    base = BASE
    old = parse_config(base)
    batch = parse_config({**base, "channel": {**base["channel"], "batch_max_events": 7}})
    threads = parse_config({**base, "channel": {**base["channel"], "threads": 7}})
    rows = table("setting")
    assert plan_change(old, batch).kind == "in-place" and rows["channel.batch_max_events"] == "in place"
    assert plan_change(old, threads).kind == "resubscribe" and rows["channel.threads"] == "restart"


def test_the_stats_summary_keys_are_the_documented_ones() -> None:
    assert set(table("`stats.summary()` key")) == set(ChannelStats().summary())


def test_the_partition_figures_fields_are_the_documented_ones() -> None:
    assert set(table("`PartitionFigures` field")) == field_names(PartitionFigures)


def test_the_partition_snapshot_fields_are_the_documented_ones() -> None:
    assert set(table("`PartitionSnapshot` field")) == field_names(PartitionSnapshot)


def test_the_metrics_view_fields_are_the_documented_ones() -> None:
    assert set(table("`ChannelView` field")) == field_names(ChannelView)
    assert set(table("`PartitionView` field")) == field_names(PartitionView)


def test_the_documented_channel_members_exist() -> None:
    for name in (
        "shutdown_clean",
        "watch",
        "reconfigure",
        "pause",
        "resume",
        "paused",
        "partitions",
        "owned_partitions",
        "positions",
    ):
        assert hasattr(InboundChannel, name), name
    stats = ChannelStats()
    for method in ("summary", "rebalance_counts", "refusal_counts", "loss_counts", "partition", "partitions"):
        assert callable(getattr(stats, method)), method


def test_a_channel_keeps_its_shutdown_result_for_with() -> None:
    channel = InboundChannel(parse_config(BASE), RecordingProcessor(), add_ons=())
    assert channel.shutdown_clean is None
    assert channel.shutdown() is True  # not running: nothing to release
    assert channel.shutdown_clean is True

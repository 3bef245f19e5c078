"""The metric families and their known label values, as a scrape shows them (no servers needed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prometheus_client.core import Metric

import jetkafka
from jetkafka.channel._stats import DurationHistogram, PartitionFigures
from jetkafka.coordination._membership import reason_label
from jetkafka.kafka_groups._mirror import MirroredPartition, MirrorSnapshot
from jetkafka.kafka_groups._mirror_failures import KNOWN_FAILURE_REASONS
from jetkafka.ops._metric_families import ERROR_KINDS, FAMILIES, KNOWN_LABEL_VALUES, REBALANCE_REASONS
from jetkafka.ops._metrics import ChannelView, JetkafkaCollector, PartitionView, build_version

SOURCES = Path(__file__).resolve().parents[2] / "jetkafka"


class FixedView:
    """Stands in for a channel's ChannelMetrics: the collector only asks it for a view."""

    def __init__(self, view: ChannelView) -> None:
        self._view = view
        self.channel = type("Channel", (), {"consumer_id": view.consumer})()

    def view(self) -> ChannelView:
        return self._view


def collect(*views: ChannelView) -> dict[str, Metric]:
    collector = JetkafkaCollector()
    for view in views:
        stand_in: Any = FixedView(view)
        collector.add(stand_in)
    return {family.name: family for family in collector.collect()}


def channel_view(consumer: str = "c1", **fields: Any) -> ChannelView:
    figures = PartitionFigures(7, {"advance": 2}, {"processor_raised": 1}, DurationHistogram())
    defaults: dict[str, Any] = {
        "group": "g",
        "consumer": consumer,
        "paused": False,
        "zookeeper_state": "CONNECTED",
        "partitions": [PartitionView(("t", 0), 7, False, figures, (0, 9), lag_seconds=12.5)],
        "rebalances": {"start": 1},
        "commits": 3,
        "commits_refused": {},
        "events_lost": {},
        "watermarks_updated": 1.0,
        "topics": {"t": (4, 3)},
    }
    defaults.update(fields)
    return ChannelView(**defaults)


def samples(family: Metric) -> dict[frozenset[tuple[str, str]], float]:
    return {frozenset(s.labels.items()): s.value for s in family.samples if not s.name.endswith("_created")}


def test_every_known_label_value_is_there_from_the_first_scrape_at_zero() -> None:
    families = collect(channel_view())
    errors = {dict(ls)["kind"]: v for ls, v in samples(families["jetkafka_partition_errors"]).items()}
    assert errors == {**dict.fromkeys(ERROR_KINDS, 0.0), "processor_raised": 1.0}
    batches = {dict(ls)["response"]: v for ls, v in samples(families["jetkafka_partition_batches"]).items()}
    assert batches == {"advance": 2.0, "revert": 0.0, "get_next": 0.0}
    reasons = {dict(ls)["reason"]: v for ls, v in samples(families["jetkafka_rebalances"]).items()}
    assert reasons == {**dict.fromkeys(REBALANCE_REASONS, 0.0), "start": 1.0}
    causes = {dict(ls)["cause"] for ls in samples(families["jetkafka_commits_refused"])}
    assert causes == set(KNOWN_LABEL_VALUES["refused"]["cause"])
    lost = {dict(ls)["reason"] for ls in samples(families["jetkafka_events_lost"])}
    assert lost == {"retention", "skipped", "truncated"}


def test_recovery_loss_reasons_appear_with_a_partition_in_recovery() -> None:
    figures = PartitionFigures(0, {}, {}, DurationHistogram(), recovery_remaining=40)
    view = channel_view(partitions=[PartitionView(("t", 1), 0, False, figures, None)])
    lost = samples(collect(view)["jetkafka_recovery_lost_events"])
    assert {dict(ls)["reason"]: v for ls, v in lost.items()} == {"retention": 0.0, "max_records": 0.0}


def test_lag_seconds_build_info_and_the_group_gauges() -> None:
    families = collect(channel_view("c1"), channel_view("c2", partitions=[]))
    assert samples(families["jetkafka_partition_lag_seconds"]) == {
        frozenset({("group", "g"), ("topic", "t"), ("partition", "0")}): 12.5
    }
    assert samples(families["jetkafka_build_info"]) == {frozenset({("version", jetkafka.__version__)}): 1.0}
    assert build_version() == jetkafka.__version__
    # Two channels of one group in a process: the group-wide figures once.
    topic = frozenset({("group", "g"), ("topic", "t")})
    assert samples(families["jetkafka_group_topic_partitions"]) == {topic: 4.0}
    assert samples(families["jetkafka_group_owned_partitions"]) == {topic: 3.0}


def test_a_partition_without_lag_seconds_has_no_sample() -> None:
    figures = PartitionFigures(0, {}, {}, DurationHistogram())
    view = channel_view(partitions=[PartitionView(("t", 0), 0, False, figures, (0, 9))])
    assert samples(collect(view)["jetkafka_partition_lag_seconds"]) == {}


def test_the_known_error_kinds_cover_every_kind_the_sources_count() -> None:
    counted: set[str] = set()
    for path in SOURCES.rglob("*.py"):
        counted |= set(re.findall(r"\.error\(\s*[\w.]+,\s*\"(\w+)\"\)", path.read_text()))
    # Callbacks the channel calls with its hook_failed report, counted as "<hook>_raised".
    assert 'f"{hook}_raised"' in (SOURCES / "channel" / "_responses.py").read_text()
    for path in (SOURCES / "channel").glob("*.py"):
        counted |= {f"{hook}_raised" for hook in re.findall(r"\.call\(state, \"(on_\w+)\"", path.read_text())}
    counted.add("on_exception_raised")  # processors.calls.ask_on_exception, through hook_failed
    assert counted, "the scan found nothing: the pattern no longer matches the sources"
    assert counted <= set(ERROR_KINDS), f"not in ERROR_KINDS: {sorted(counted - set(ERROR_KINDS))}"


def test_the_known_rebalance_reasons_cover_every_reason_requested() -> None:
    requested: set[str] = set()
    for path in SOURCES.rglob("*.py"):
        requested |= set(re.findall(r"request_rebalance\(\s*self,\s*f?\"([^\"{]+)", path.read_text()))
    assert requested, "the scan found nothing: the pattern no longer matches the sources"
    labels = {reason_label(reason) for reason in requested}
    assert labels <= set(REBALANCE_REASONS), f"not in REBALANCE_REASONS: {sorted(labels - set(REBALANCE_REASONS))}"


def test_every_family_with_known_values_exists() -> None:
    for key, labels in KNOWN_LABEL_VALUES.items():
        assert set(labels) <= set(FAMILIES[key][3]), key



MIRROR_FAMILIES = (
    "jetkafka_kafka_mirror_trail_seconds",
    "jetkafka_kafka_mirror_behind_offsets",
    "jetkafka_kafka_mirror_commits",
    "jetkafka_kafka_mirror_failures",
)


def test_the_kafka_mirror_families_are_there_with_commit_to_kafka_only() -> None:
    figures = PartitionFigures(0, {}, {}, DurationHistogram())
    held = [PartitionView(("t", 0), 17, False, figures, None), PartitionView(("t", 1), 3, False, figures, None)]
    mirror = MirrorSnapshot(
        # t[1] has had no commit offered yet; t[9] is not held here (released, answer pending).
        {("t", 0): MirroredPartition(2.5, 7, 17, 10), ("t", 9): MirroredPartition(9.0, 1, 5, 4)},
        commits_sent=4,
        partitions_sent=6,
        failures={"UNKNOWN_MEMBER_ID": 2, "SOME_NEW_REASON": 1},
    )
    families = collect(channel_view(partitions=held, kafka_mirror=mirror))
    p0, p1 = ({("group", "g"), ("topic", "t"), ("partition", str(p))} for p in (0, 1))
    assert samples(families["jetkafka_kafka_mirror_trail_seconds"]) == {frozenset(p0): 2.5, frozenset(p1): 0.0}
    assert samples(families["jetkafka_kafka_mirror_behind_offsets"]) == {frozenset(p0): 7.0}
    instance = {("group", "g"), ("consumer", "c1")}
    assert samples(families["jetkafka_kafka_mirror_commits"]) == {frozenset(instance): 4.0}
    failures = {dict(ls)["reason"]: v for ls, v in samples(families["jetkafka_kafka_mirror_failures"]).items()}
    assert failures == {**dict.fromkeys(KNOWN_FAILURE_REASONS, 0.0), "UNKNOWN_MEMBER_ID": 2.0, "SOME_NEW_REASON": 1.0}
    assert {"GROUP_AUTHORIZATION_FAILED", "UNSUPPORTED_VERSION", "_TIMED_OUT"} <= set(KNOWN_FAILURE_REASONS)

    without = collect(channel_view(partitions=held))
    assert all(samples(without[name]) == {} for name in MIRROR_FAMILIES)

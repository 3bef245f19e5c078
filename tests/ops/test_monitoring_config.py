"""config/monitoring/: the alert rules pass promtool, and the rules and the dashboard use only
metrics a running channel exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from jetkafka.devstack._ports import free_port
from jetkafka.ops._metric_families import FAMILIES
from tests.ops.test_metrics import metrics_channel
from tests.support.channels import RecordingProcessor, wait_until
from tests.support.scrape import scrape, value

MONITORING = Path(__file__).resolve().parents[2] / "config" / "monitoring"
RULE_FILES = sorted(MONITORING.glob("*.yml"))
DASHBOARD = MONITORING / "jetkafka-dashboard.json"
METRIC_NAME = re.compile(r"\bjetkafka_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def rule_expressions() -> Iterator[str]:
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                yield rule["expr"]


def dashboard_expressions() -> Iterator[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            yield query["query"]


def names_used() -> set[str]:
    return {name for expr in (*rule_expressions(), *dashboard_expressions()) for name in METRIC_NAME.findall(expr)}


def series_names(families: dict[str, str]) -> set[str]:
    """The names series of these families (family name -> type) carry in PromQL."""
    return {name + suffix for name, kind in families.items() for suffix in SUFFIXES[kind]}


def test_the_rule_files_are_there() -> None:
    assert MONITORING / "jetkafka-alerts.yml" in RULE_FILES
    assert len(list(rule_expressions())) >= 6
    assert len(list(dashboard_expressions())) >= 10


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: apt-get install prometheus)")
def test_promtool_accepts_the_alert_rules() -> None:
    result = subprocess.run(
        ["promtool", "check", "rules", *map(str, RULE_FILES)], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rules_and_the_dashboard_use_only_metrics_in_the_table() -> None:
    kinds = {"CounterMetricFamily": "counter", "GaugeMetricFamily": "gauge", "HistogramMetricFamily": "histogram"}
    known = series_names({name: kinds[cls.__name__] for cls, name, _, _ in FAMILIES.values()})
    used = names_used()
    assert {"jetkafka_partition_lag_seconds", "jetkafka_group_owned_partitions", "jetkafka_commits_refused_total"} <= used
    assert used <= known, f"not exported: {sorted(used - known)}"


def test_the_rules_and_the_dashboard_use_only_metrics_a_running_channel_exports(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    port = free_port()
    with metrics_channel(zk_connect, kafka_config, topic, RecordingProcessor(), port) as channel:
        wait_until(lambda: len(channel.owned_partitions()) == 2, what="both partitions taken")

        def exported() -> dict[str, str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                text = response.read().decode()
            return {f.name: f.type for f in text_string_to_metric_families(text) if f.name.startswith("jetkafka_")}

        # The group-wide figures come with the first look-up after the start.
        group = {"group": "g", "topic": topic}
        wait_until(
            lambda: value(scrape(port), "jetkafka_group_owned_partitions", **group) == 2, what="2 partitions owned"
        )
        assert value(scrape(port), "jetkafka_group_topic_partitions", **group) == 2
        families = exported()
    used = names_used()
    missing = used - series_names(families)
    assert not missing, f"used by config/monitoring but not exported by a running channel: {sorted(missing)}"


def static_description(alert: str) -> str:
    for expr_rule in (r for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]):
        if expr_rule["alert"] == alert:
            description: str = expr_rule["annotations"]["description"]
            return description
    raise AssertionError(f"no alert {alert}")


def firing(alert: str, labels: dict[str, str], summary: str, description: str | None = None) -> dict[str, Any]:
    return {
        "exp_labels": labels,
        "exp_annotations": {"summary": summary, "description": description or static_description(alert)},
    }


# Each case: series over time (one sample a minute), then when the alert is silent and when it fires.
ALERT_CASES: list[dict[str, Any]] = [
    {
        "input_series": [
            {"series": 'jetkafka_group_topic_partitions{group="g",topic="t",instance="a"}', "values": "4x30"},
            # One partition loses its owner at minute 6 and gets none.
            {"series": 'jetkafka_group_owned_partitions{group="g",topic="t",instance="a"}', "values": "4x5 3x25"},
        ],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "JetkafkaPartitionWithoutOwner", "exp_alerts": []},
            {"eval_time": "9m", "alertname": "JetkafkaPartitionWithoutOwner", "exp_alerts": []},  # within "for"
            {
                "eval_time": "15m",
                "alertname": "JetkafkaPartitionWithoutOwner",
                "exp_alerts": [
                    firing(
                        "JetkafkaPartitionWithoutOwner",
                        {"group": "g", "topic": "t", "severity": "critical"},
                        "1 partition(s) of t have no owner in group g",
                    )
                ],
            },
        ],
    },
    {
        "input_series": [
            # Stopped processing: the next record ages a minute every minute.
            {"series": 'jetkafka_partition_lag_seconds{group="g",topic="t",partition="0"}', "values": "0+60x30"},
            # Caught up all along.
            {"series": 'jetkafka_partition_lag_seconds{group="g",topic="t",partition="1"}', "values": "0x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "JetkafkaLagSecondsHigh", "exp_alerts": []},
            {
                "eval_time": "15m",
                "alertname": "JetkafkaLagSecondsHigh",
                "exp_alerts": [
                    firing(
                        "JetkafkaLagSecondsHigh",
                        {"group": "g", "topic": "t", "partition": "0", "severity": "warning"},
                        "g is 15m 0s behind on t[0]",
                    )
                ],
            },
            {
                "eval_time": "15m",
                "alertname": "JetkafkaLagSecondsRising",
                "exp_alerts": [
                    firing(
                        "JetkafkaLagSecondsRising",
                        {"group": "g", "topic": "t", "partition": "0", "severity": "warning"},
                        "g falls further behind on t[0]",
                    )
                ],
            },
        ],
    },
    {
        "input_series": [
            {
                "series": 'jetkafka_commits_refused_total{group="g",consumer="c1",cause="fenced",instance="a"}',
                "values": "0x5 1 2 3 4 5x20",
            },
            {
                "series": 'jetkafka_commits_refused_total{group="g",consumer="c1",cause="dropped",instance="a"}',
                "values": "0x30",
            },
            {
                "series": 'jetkafka_rebalances_total{group="g",consumer="c1",reason="new_session",instance="a"}',
                "values": "0x5 1x25",
            },
            {
                "series": 'jetkafka_rebalances_total{group="g",consumer="c1",reason="timer",instance="a"}',
                "values": "0+1x30",
            },
        ],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "JetkafkaCommitsRefused", "exp_alerts": []},
            {
                "eval_time": "12m",
                "alertname": "JetkafkaCommitsRefused",
                "exp_alerts": [
                    firing(
                        "JetkafkaCommitsRefused",
                        {"group": "g", "consumer": "c1", "cause": "fenced", "severity": "warning"},
                        "c1 of g: commits refused (fenced)",
                    )
                ],
            },
            {"eval_time": "5m", "alertname": "JetkafkaSessionExpired", "exp_alerts": []},
            {
                "eval_time": "8m",
                "alertname": "JetkafkaSessionExpired",
                "exp_alerts": [
                    firing(
                        "JetkafkaSessionExpired",
                        {"group": "g", "consumer": "c1", "severity": "warning"},
                        "c1 of g lost its ZooKeeper session",
                    )
                ],
            },
            {"eval_time": "29m", "alertname": "JetkafkaSessionExpired", "exp_alerts": []},  # 15 min on
        ],
    },
    {
        "input_series": [
            # Partition 0: 100 events to recover, none recovered. Partition 1 recovers one a minute.
            {"series": 'jetkafka_recovery_events_remaining{group="g",topic="t",partition="0"}', "values": "100x60"},
            {"series": 'jetkafka_recovered_events_total{group="g",topic="t",partition="0"}', "values": "0x60"},
            {"series": 'jetkafka_recovery_events_remaining{group="g",topic="t",partition="1"}', "values": "100-1x60"},
            {"series": 'jetkafka_recovered_events_total{group="g",topic="t",partition="1"}', "values": "0+1x60"},
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "JetkafkaRecoveryStuck", "exp_alerts": []},
            {
                "eval_time": "50m",
                "alertname": "JetkafkaRecoveryStuck",
                "exp_alerts": [
                    firing(
                        "JetkafkaRecoveryStuck",
                        {"group": "g", "topic": "t", "partition": "0", "severity": "warning"},
                        "Recovery of t[0] in g makes no progress",
                        static_description("JetkafkaRecoveryStuck").replace("{{ $value }}", "100"),
                    )
                ],
            },
        ],
    },
    {
        "input_series": [
            # Partition 0 stops moving on at minute 5 (a poison record); partition 1 moves on.
            {"series": 'jetkafka_partition_failing_seconds{group="g",topic="t",partition="0"}', "values": "0x4 60+60x25"},
            {"series": 'jetkafka_partition_failing_seconds{group="g",topic="t",partition="1"}', "values": "0x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "9m", "alertname": "JetkafkaPartitionStuck", "exp_alerts": []},  # 5 minutes: not yet
            {
                "eval_time": "10m",
                "alertname": "JetkafkaPartitionStuck",
                "exp_alerts": [
                    firing(
                        "JetkafkaPartitionStuck",
                        {"group": "g", "topic": "t", "partition": "0", "severity": "critical"},
                        "t[0] of g has not moved on for 6m 0s",
                    )
                ],
            },
        ],
    },
    {
        "input_series": [
            # Under ordering key, partition 0's oldest record stops finishing at minute 2; partition
            # 1's commit point moves on (its oldest record is never older than a few seconds).
            {"series": 'jetkafka_partition_oldest_unfinished_seconds{group="g",topic="t",partition="0"}', "values": "1x1 60+60x28"},
            {"series": 'jetkafka_partition_oldest_unfinished_seconds{group="g",topic="t",partition="1"}', "values": "2x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "14m", "alertname": "JetkafkaCommitPointHeld", "exp_alerts": []},  # over 600 s, not 5m yet
            {
                "eval_time": "17m",
                "alertname": "JetkafkaCommitPointHeld",
                "exp_alerts": [
                    firing(
                        "JetkafkaCommitPointHeld",
                        {"group": "g", "topic": "t", "partition": "0", "severity": "warning"},
                        "t[0] of g: its oldest unfinished record is 16m 0s old",
                    )
                ],
            },
        ],
    },
    {
        "input_series": [
            # commit_to_kafka refused from minute 3 on: the oldest unconfirmed commit ages; partition 1
            # trails by a commit interval now and then, as it normally does.
            {"series": 'jetkafka_kafka_mirror_trail_seconds{group="g",topic="t",partition="0"}', "values": "0x2 0+60x27"},
            {"series": 'jetkafka_kafka_mirror_trail_seconds{group="g",topic="t",partition="1"}', "values": "0.1 0x29"},
        ],
        "alert_rule_test": [
            {"eval_time": "6m", "alertname": "JetkafkaKafkaMirrorTrailing", "exp_alerts": []},  # over 60 s, not 5m yet
            {
                "eval_time": "10m",
                "alertname": "JetkafkaKafkaMirrorTrailing",
                "exp_alerts": [
                    firing(
                        "JetkafkaKafkaMirrorTrailing",
                        {"group": "g", "topic": "t", "partition": "0", "severity": "warning"},
                        "Kafka's copy of g's offset of t[0] trails by 7m 0s",
                    )
                ],
            },
        ],
    },
]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: apt-get install prometheus)")
def test_the_alerts_fire_when_they_should_and_not_before(tmp_path: Path) -> None:
    tests = {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", **case} for case in ALERT_CASES],
    }
    test_file = tmp_path / "alerts_test.yml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        ["promtool", "test", "rules", str(test_file)], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr

"""``auto_offset_reset: kafka-group``'s configuration, and the reset target it shares with the
offset commands (the start itself: tests/channel/test_start_offsets.py; the switch-over:
test_switch_over.py)."""

from __future__ import annotations

from typing import Any

import pytest

from jetkafka.config import parse_config
from jetkafka.errors import ConfigError
from jetkafka.kafka_groups._start import start_fallback
from jetkafka.ops._targets import Target


def config(**channel: Any) -> Any:
    return parse_config(
        {
            "zookeeper": {"connect": "127.0.0.1:2181"},
            "kafka": {"bootstrap.servers": "127.0.0.1:9092"},
            "channel": {"group": "orders", "topics": ["orders"], **channel},
        }
    )


def test_the_start_group_is_the_mirror_group_unless_named() -> None:
    assert config(auto_offset_reset="kafka-group").start_kafka_group == "jetkafka.orders"
    assert config(auto_offset_reset="kafka-group", start_kafka_group="orders-app").start_kafka_group == "orders-app"


def test_start_kafka_group_without_kafka_group_reset_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"channel\.start_kafka_group: is only used with auto_offset_reset: kafka-group"):
        config(start_kafka_group="orders-app")


def test_an_unknown_reset_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="kafka-group"):
        config(auto_offset_reset="kafka")


def test_partitions_a_kafka_group_never_committed_follow_auto_offset_reset() -> None:
    assert start_fallback(config(auto_offset_reset="latest")) == "latest"
    assert start_fallback(config(auto_offset_reset="kafka-group")) == "earliest"


def test_the_reset_target_round_trips_with_a_group_id_holding_colons() -> None:
    target = Target.kafka_group("team:orders:v2", "latest")
    again = Target.from_spec(target.spec)
    assert again == target and again.ref == "team:orders:v2" and again.fallback == "latest"
    assert again.describe() == "Kafka group team:orders:v2's offsets (latest where it has none)"

"""The ``metrics:`` section: defaults, ranges, the listen address, and its documentation."""

from __future__ import annotations

from typing import Any

import pytest

from jetkafka.config import MetricsConfig, parse_config
from jetkafka.errors import ConfigError

BASE: dict[str, Any] = {
    "zookeeper": {"connect": "localhost:2181"},
    "kafka": {"bootstrap.servers": "localhost:9092"},
    "channel": {"group": "g", "topics": ["orders"]},
}


def with_metrics(**metrics: Any) -> dict[str, Any]:
    return {**BASE, "metrics": metrics}


def test_absent_section_means_no_endpoint() -> None:
    config = parse_config(BASE)
    assert config.metrics == MetricsConfig()
    assert config.metrics.port is None
    assert config.metrics.host == "127.0.0.1"
    assert config.metrics.watermark_interval_s == 10.0


def test_values_are_read() -> None:
    config = parse_config(with_metrics(port=9464, host="0.0.0.0", watermark_interval_s=2.5))
    assert (config.metrics.port, config.metrics.host, config.metrics.watermark_interval_s) == (9464, "0.0.0.0", 2.5)


@pytest.mark.parametrize("host", ["localhost", "metrics.example.com", "::", "::1", "10.1.2.3"])
def test_listen_hosts(host: str) -> None:
    assert parse_config(with_metrics(port=1, host=host)).metrics.host == host


@pytest.mark.parametrize(
    ("metrics", "key", "fragment"),
    [
        ({"port": 70000}, "metrics.port", "out of range 0..65535"),
        ({"port": -1}, "metrics.port", "out of range"),
        ({"port": "9464"}, "metrics.port", "expected an integer"),
        ({"host": "my host"}, "metrics.host", "not a host name or IP address"),
        ({"host": ""}, "metrics.host", ""),
        ({"watermark_interval_s": 0}, "metrics.watermark_interval_s", "out of range"),
        ({"prot": 9464}, "metrics.prot", "Did you mean 'port'"),
    ],
)
def test_invalid_values(metrics: dict[str, Any], key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(with_metrics(**metrics))
    assert caught.value.key_path == key
    assert fragment in str(caught.value)

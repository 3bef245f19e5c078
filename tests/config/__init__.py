"""A minimal valid configuration, and a way to check the one error a variant of it raises."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from jetkafka.config import parse_config
from jetkafka.errors import ConfigError

SOURCE = "test.yaml"


def minimal() -> dict[str, Any]:
    return {
        "zookeeper": {"connect": "localhost:2181"},
        "kafka": {"bootstrap.servers": "localhost:9092"},
        "channel": {"group": "orders-indexer", "topics": ["orders"]},
    }


def error_of(change: Callable[[dict[str, Any]], None], env: Mapping[str, str] | None = None) -> ConfigError:
    """The ConfigError raised by the minimal configuration after ``change``."""
    data = copy.deepcopy(minimal())
    change(data)
    with pytest.raises(ConfigError) as caught:
        parse_config(data, SOURCE, env=env or {})
    return caught.value

"""One local Spark session for the whole test session: small, quiet and without a UI."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jetkafka.config._schema import SparkConfig
from jetkafka.spark._session import build_session
from tests.spark.helpers import TEST_SPARK_CONF


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    config = SparkConfig(master="local[2]", app_name="jetkafka-tests", driver_memory="1g", conf=TEST_SPARK_CONF)
    session = build_session(config)
    yield session
    session.stop()

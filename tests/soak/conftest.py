"""Options of the soak: ``--seed``, ``--soak-duration``, ``--soak-events``, ``--soak-dir``.

Each falls back to an environment variable (``JETKAFKA_SOAK_SEED``, ``JETKAFKA_SOAK_DURATION_S``,
``JETKAFKA_SOAK_EVENTS``, ``JETKAFKA_SOAK_DIR``), so a run can be repeated from a report with
the same seed whichever way it was started. Options given on the command line need pytest to
load this file first, which it does when ``tests/soak`` is among the paths given (``make soak``
does that).
"""

from __future__ import annotations

import os
import random

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soak")
    group.addoption("--seed", type=int, default=None, help="soak seed (default $JETKAFKA_SOAK_SEED, else random)")
    group.addoption("--soak-duration", type=float, default=None, help="seconds of load (default 600)")
    group.addoption("--soak-events", type=int, default=None, help="events to produce (default 1,000,000; Spark 300,000)")
    group.addoption("--soak-dir", default=None, help="where run directories go (default pytest's tmp_path)")


def _option(config: pytest.Config, name: str, env: str) -> str | None:
    try:
        value = config.getoption(name)
    except ValueError:  # this file was not loaded early enough to add the option
        value = None
    return str(value) if value is not None else os.environ.get(env)


@pytest.fixture
def soak_seed(request: pytest.FixtureRequest) -> int:
    value = _option(request.config, "--seed", "JETKAFKA_SOAK_SEED")
    return int(value) if value else random.SystemRandom().randrange(1, 1_000_000)


@pytest.fixture
def soak_duration(request: pytest.FixtureRequest) -> float | None:
    value = _option(request.config, "--soak-duration", "JETKAFKA_SOAK_DURATION_S")
    return float(value) if value else None


@pytest.fixture
def soak_events(request: pytest.FixtureRequest) -> int | None:
    value = _option(request.config, "--soak-events", "JETKAFKA_SOAK_EVENTS")
    return int(value) if value else None


@pytest.fixture
def soak_dir(request: pytest.FixtureRequest) -> str | None:
    return _option(request.config, "--soak-dir", "JETKAFKA_SOAK_DIR")

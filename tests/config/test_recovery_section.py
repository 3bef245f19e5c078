"""The ``recovery:`` section: off by default, its ranges, and keys that only make sense with recovery on."""

from __future__ import annotations

import pickle

import pytest

from jetkafka.config import parse_config
from jetkafka.config._schema import ProcessorConfig, RecoveryConfig
from tests.config import SOURCE, error_of, minimal


def recovery_of(section: object) -> RecoveryConfig:
    return parse_config({**minimal(), "recovery": section}, SOURCE, env={}).recovery


def test_off_by_default() -> None:
    recovery = parse_config(minimal(), SOURCE, env={}).recovery
    assert recovery == RecoveryConfig()
    assert recovery.max_partition_lag is None and recovery.max_records is None and recovery.processor is None
    assert (recovery.max_rate, recovery.batch_max_events) == (1000, 500)
    assert recovery_of(None) == recovery  # "recovery:" with everything commented out


def test_full_section() -> None:
    recovery = recovery_of(
        {
            "max_partition_lag": 100_000,
            "max_records": 5_000_000,
            "max_rate": 2500,
            "batch_max_events": 200,
            "processor": {"class": "myapp.backfill:Backfill", "options": {"index": "orders-backfill"}},
        }
    )
    assert recovery.max_partition_lag == 100_000 and recovery.max_records == 5_000_000
    assert (recovery.max_rate, recovery.batch_max_events) == (2500, 200)
    assert recovery.processor == ProcessorConfig("myapp.backfill:Backfill", {"index": "orders-backfill"})
    assert pickle.loads(pickle.dumps(recovery)) == recovery


@pytest.mark.parametrize("key", ["max_records", "processor"])
def test_keys_that_need_recovery_on(key: str) -> None:
    value = {"class": "a:B"} if key == "processor" else 10
    err = error_of(lambda d: d.update(recovery={key: value}))
    assert err.key_path == f"recovery.{key}"
    assert err.problem == "is only used when recovery is on, but max_partition_lag is not set"
    assert "max_partition_lag" in err.fix


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("max_partition_lag", 0, "0 is out of range 1.."),
        ("max_records", 0, "0 is out of range 1.."),
        ("max_rate", 0, "0 is out of range 1..10000000"),
        ("batch_max_events", 0, "0 is out of range 1..1000000"),
        ("max_rate", "fast", "expected an integer, got 'fast' (a string)"),
        ("max_partition_lag", 1.5, "expected an integer"),
    ],
)
def test_ranges_and_types(key: str, value: object, problem: str) -> None:
    section = {"max_partition_lag": 1000, key: value}
    err = error_of(lambda d: d.update(recovery=section))
    assert err.key_path == f"recovery.{key}"
    assert problem in err.problem


def test_unknown_key_and_bad_processor() -> None:
    err = error_of(lambda d: d.update(recovery={"max_lag": 10}))
    assert err.key_path == "recovery.max_lag"
    assert "max_partition_lag" in err.problem + err.fix
    err = error_of(lambda d: d.update(recovery={"max_partition_lag": 10, "processor": {"class": "no-colon"}}))
    assert err.key_path == "recovery.processor.class"
    assert "is not of the form 'package.module:ClassName'" in err.problem

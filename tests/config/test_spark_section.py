"""The ``spark:`` section: defaults, the master/remote choice, driver memory and free conf keys."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from jetkafka.config import parse_config
from jetkafka.config._schema import DRIVER_MEMORY_MAX_MB, DRIVER_MEMORY_MIN_MB, SparkConfig, auto_driver_memory
from tests.config import SOURCE, error_of, minimal


def spark_of(section: object) -> SparkConfig:
    return parse_config({**minimal(), "spark": section}, SOURCE, env={}).spark


def test_defaults() -> None:
    spark = parse_config(minimal(), SOURCE, env={}).spark
    assert spark == SparkConfig()
    assert spark.master == "local[*]"
    assert spark.app_name == "jetkafka"
    assert spark.remote is None and spark.driver_memory is None
    assert dict(spark.conf) == {}
    assert spark_of(None) == spark  # "spark:" with everything commented out


def test_full_section() -> None:
    conf = {"spark.sql.shuffle.partitions": 8, "spark.executor.memory": "4g", "spark.sql.ansi.enabled": True}
    spark = spark_of({"master": "spark://head:7077", "app_name": "minutes", "driver_memory": "6g", "conf": conf})
    assert spark.master == "spark://head:7077"
    assert spark.effective_driver_memory == "6g"
    assert dict(spark.conf) == conf
    assert pickle.loads(pickle.dumps(spark)) == spark
    with pytest.raises(TypeError):
        spark.conf["x"] = 1  # type: ignore[index]


def test_remote_replaces_master() -> None:
    spark = spark_of({"remote": "sc://connect.example.com:15002/;token=abc"})
    assert spark.remote == "sc://connect.example.com:15002/;token=abc"
    assert spark.master is None


def test_remote_and_master_together() -> None:
    err = error_of(lambda d: d.update(spark={"remote": "sc://h:15002", "master": "local[2]"}))
    assert err.key_path == "spark.remote"
    assert "cannot be combined with master (local[2])" in err.problem


@pytest.mark.parametrize("url", ["http://h:15002", "sc://", "h:15002"])
def test_remote_must_be_a_connect_url(url: str) -> None:
    err = error_of(lambda d: d.update(spark={"remote": url}))
    assert err.key_path == "spark.remote"
    assert err.problem == f"{url!r} is not a Spark Connect URL"
    assert "sc://host:port" in err.fix


@pytest.mark.parametrize("size", ["4 GB", "4gb", "0g", "-1g", "lots"])
def test_driver_memory_is_a_jvm_size(size: str) -> None:
    err = error_of(lambda d: d.update(spark={"driver_memory": size}))
    assert err.key_path == "spark.driver_memory"
    assert "is not a JVM memory size" in err.problem


def test_driver_memory_in_two_places() -> None:
    err = error_of(lambda d: d.update(spark={"driver_memory": "4g", "conf": {"spark.driver.memory": "2g"}}))
    assert err.key_path == "spark.driver_memory"
    assert err.problem == "is also set as conf: spark.driver.memory"
    assert spark_of({"conf": {"spark.driver.memory": "2g"}}).effective_driver_memory == "2g"


def test_automatic_driver_memory_fits_the_machine() -> None:
    size = auto_driver_memory()
    mb = int(size[:-1]) * (1024 if size.endswith("g") else 1)
    assert DRIVER_MEMORY_MIN_MB <= mb <= DRIVER_MEMORY_MAX_MB
    assert SparkConfig().effective_driver_memory == size


def test_unknown_and_misplaced_keys() -> None:
    err = error_of(lambda d: d.update(spark={"mastr": "local[2]"}))
    assert err.key_path == "spark.mastr"
    assert "Did you mean 'master'?" in err.problem
    err = error_of(lambda d: d.update(spark={"conf": {"spark.a": {"nested": 1}}}))
    assert err.key_path == "spark.conf.spark.a"


def test_empty_values() -> None:
    assert error_of(lambda d: d.update(spark={"master": ""})).problem == "must not be empty"
    assert error_of(lambda d: d.update(spark={"app_name": ""})).problem == "must not be empty"


def test_replace_keeps_the_rules() -> None:
    spark = SparkConfig(remote="sc://h:15002")
    with pytest.raises(ValueError, match="cannot be combined with master"):
        dataclasses.replace(spark, master="local[2]")

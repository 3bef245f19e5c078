"""Errors about keys, types, ranges and choices, produced by the generic validator."""

from __future__ import annotations

from typing import Any

import pytest

from jetkafka.config import parse_config
from tests.config import SOURCE, error_of, minimal


def test_minimal_configuration_takes_the_defaults() -> None:
    config = parse_config(minimal(), SOURCE, env={})
    channel = config.channel
    assert channel.topics == ("orders",)
    assert (channel.threads, channel.coordinator, channel.auto_offset_reset) == (4, "dynamic", "earliest")
    assert (channel.batch_max_events, channel.buffer_max_events) == (500, 10_000)
    assert config.zookeeper.session_timeout_s == 10.0
    assert config.processor is None
    assert config.logging.level == "INFO"
    assert config.kafka_group_id == "jetkafka.orders-indexer"


def test_error_names_file_key_and_fix() -> None:
    err = error_of(lambda d: d["channel"].update(thread=4))
    assert err.source == SOURCE
    assert err.key_path == "channel.thread"
    assert str(err).startswith("test.yaml: channel.thread: unknown key. Did you mean 'threads'?")
    assert "\n  fix: rename it to 'threads'; known keys in channel: group, topics, threads" in str(err)


def test_unknown_top_level_section() -> None:
    err = error_of(lambda d: d.update(chanel={}))
    assert err.key_path == "chanel"
    assert err.problem == "unknown section. Did you mean 'channel'?"
    assert "known sections: zookeeper, kafka, channel, processor, logging" in err.fix


def test_unknown_key_that_belongs_to_another_section() -> None:
    err = error_of(lambda d: d.update(threads=8))
    assert err.problem == "unknown section"
    assert "'threads' belongs under channel:" in err.fix
    err = error_of(lambda d: d["channel"].update({"bootstrap.servers": "x:1"}))
    assert "put it under kafka:" in err.fix


def test_kafka_and_processor_options_keys_are_free() -> None:
    data = minimal()
    data["kafka"]["fetch.wait.max.ms"] = 100
    data["kafka"]["some.future.property"] = True
    data["processor"] = {"class": "app.mod:Proc", "options": {"anything": [1, {"x": None}], "Other": 1}}
    config = parse_config(data, SOURCE, env={})
    assert config.kafka["fetch.wait.max.ms"] == 100
    assert config.processor is not None
    assert dict(config.processor.options) == {"anything": [1, {"x": None}], "Other": 1}


def test_wrong_type_says_expected_got_and_yaml_type() -> None:
    err = error_of(lambda d: d["channel"].update(threads="four"))
    assert err.key_path == "channel.threads"
    assert err.problem == "expected an integer, got 'four' (a string)"
    assert "threads: 4" in err.fix


def test_quoted_number_suggests_removing_quotes() -> None:
    err = error_of(lambda d: d["channel"].update(threads="8"))
    assert err.problem == "expected an integer, got '8' (a string)"
    assert err.fix == "remove the quotes: threads: 8"


def test_bool_is_not_an_integer_and_integer_is_not_a_bool() -> None:
    err = error_of(lambda d: d["channel"].update(threads=True))
    assert err.problem == "expected an integer, got true (a boolean)"
    err = error_of(lambda d: d["channel"].update(commit_to_kafka=1))
    assert err.problem == "expected true or false, got 1 (an integer)"
    assert "commit_to_kafka: true" in err.fix


def test_float_field_accepts_integers_and_rejects_units() -> None:
    data = minimal()
    data["channel"]["rebalance_interval_s"] = 5
    assert parse_config(data, env={}).channel.rebalance_interval_s == 5.0
    err = error_of(lambda d: d["channel"].update(rebalance_interval_s="30s"))
    assert err.problem == "expected a number, got '30s' (a string)"
    assert "the unit is in the key name" in err.fix


def test_integer_field_rejects_fractions() -> None:
    err = error_of(lambda d: d["channel"].update(batch_max_events=2.5))
    assert err.problem == "expected an integer, got 2.5 (a number)"


def test_bare_string_for_a_list() -> None:
    err = error_of(lambda d: d["channel"].update(topics="orders"))
    assert err.key_path == "channel.topics"
    assert err.problem == "expected a list, got 'orders' (a string)"
    assert "topics: [orders]" in err.fix


def test_number_where_a_string_is_expected() -> None:
    err = error_of(lambda d: d["channel"].update(topics=["orders", 2024]))
    assert err.key_path == "channel.topics[1]"
    assert err.problem == "expected a string, got 2024 (an integer)"
    assert 'topics: "2024"' in err.fix


def test_section_of_the_wrong_type() -> None:
    err = error_of(lambda d: d.update(channel=["a"]))
    assert err.key_path == "channel"
    assert "must be a section" in err.problem and "(a list)" in err.problem
    assert "group: orders-indexer" in err.fix


def test_empty_optional_section_means_defaults() -> None:
    data = minimal()
    data["logging"] = None
    assert parse_config(data, env={}).logging.level == "INFO"


@pytest.mark.parametrize(
    ("section", "key", "value", "problem"),
    [
        ("channel", "threads", 0, "0 is out of range 1..256"),
        ("channel", "threads", 257, "257 is out of range 1..256"),
        ("channel", "batch_max_events", 2_000_000, "2000000 is out of range 1..1000000"),
        ("channel", "idle_ms", -1, "-1 is out of range 0.."),
        ("channel", "rebalance_delay_ms", 60_001, "60001 is out of range 0..60000"),
        ("channel", "log_end_pace_ms", 10_001, "10001 is out of range 0..10000"),
        ("zookeeper", "session_timeout_s", 1.5, "1.5 is out of range 2..600"),
        ("zookeeper", "connection_timeout_s", 0.1, "0.1 is out of range 0.5..600"),
    ],
)
def test_out_of_range(section: str, key: str, value: Any, problem: str) -> None:
    err = error_of(lambda d: d[section].update({key: value}))
    assert err.key_path == f"{section}.{key}"
    assert err.problem == problem
    assert err.fix.startswith("use a value in ")


def test_infinite_number_is_rejected() -> None:
    err = error_of(lambda d: d["channel"].update(shutdown_timeout_s=float("inf")))
    assert "not a finite number" in err.problem


def test_bad_choice_with_suggestion() -> None:
    err = error_of(lambda d: d["channel"].update(coordinator="dynamc"))
    assert err.key_path == "channel.coordinator"
    assert err.problem == "'dynamc' is not one of dynamic, fixed-count, static. Did you mean 'dynamic'?"
    assert err.fix == "coordinator: dynamic"
    err = error_of(lambda d: d["channel"].update(coordinator="fixed_count"))
    assert "Did you mean 'fixed-count'?" in err.problem


def test_log_level_is_case_insensitive() -> None:
    data = minimal()
    data["logging"] = {"level": "debug"}
    assert parse_config(data, env={}).logging.level == "DEBUG"
    err = error_of(lambda d: d.update(logging={"level": "warn"}))
    assert err.problem == "'warn' is not one of DEBUG, INFO, WARNING, ERROR. Did you mean 'WARNING'?"


def test_missing_required_key_shows_an_example() -> None:
    err = error_of(lambda d: d["channel"].pop("group"))
    assert err.key_path == "channel.group"
    assert err.problem.startswith("required key is missing")
    assert err.fix == "add it under channel:, e.g. group: orders-indexer"


def test_required_key_without_value() -> None:
    err = error_of(lambda d: d["zookeeper"].update(connect=None))
    assert err.key_path == "zookeeper.connect"
    assert err.problem == "required key has no value"
    assert "connect: localhost:2181" in err.fix


@pytest.mark.parametrize("section", ["zookeeper", "kafka", "channel"])
def test_missing_required_section(section: str) -> None:
    err = error_of(lambda d: d.pop(section))
    assert err.key_path == section
    assert err.problem.startswith("required section is missing")


def test_missing_bootstrap_servers() -> None:
    err = error_of(lambda d: d.update(kafka={"client.id": "x"}))
    assert err.key_path == "kafka.bootstrap.servers"
    assert err.problem == "required key is missing"
    assert "bootstrap.servers: localhost:9092" in err.fix


@pytest.mark.parametrize(
    "key", ["enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof", "auto.offset.reset"]
)
def test_managed_kafka_keys_are_rejected(key: str) -> None:
    err = error_of(lambda d: d["kafka"].update({key: "x"}))
    assert err.key_path == f"kafka.{key}"
    assert "managed by jetkafka" in err.problem
    assert f"remove {key}" in err.fix


def test_kafka_group_id_is_allowed_and_used() -> None:
    data = minimal()
    data["kafka"]["group.id"] = "lag-view"
    assert parse_config(data, env={}).kafka_group_id == "lag-view"


def test_kafka_values_must_be_scalars() -> None:
    err = error_of(lambda d: d["kafka"].update(security={"protocol": "SSL"}))
    assert err.key_path == "kafka.security"
    assert "expected a string, a number or a boolean" in err.problem
    assert "flat dotted keys" in err.fix
    err = error_of(lambda d: d["kafka"].update({"client.id": None}))
    assert "got nothing (an empty value)" in err.problem


def test_kafka_values_pass_through_unchanged() -> None:
    data = minimal()
    data["kafka"].update({"fetch.min.bytes": 1, "check.crcs": True, "socket.timeout.ms": 1.5})
    kafka = parse_config(data, env={}).kafka
    assert kafka["fetch.min.bytes"] == 1 and kafka["check.crcs"] is True and kafka["socket.timeout.ms"] == 1.5


@pytest.mark.parametrize(
    ("connect", "problem"),
    [
        ("localhost", "'localhost' has no port"),
        ("zk1:2181,zk2:0", "port '0' is not a number in 1..65535"),
        ("zk1:70000", "port '70000' is not a number in 1..65535"),
        ("zk1:2181,,zk2:2181", "has an empty host entry"),
        ("zk1:2181/", "chroot '/' is not a valid ZooKeeper path"),
        ("zk1:2181/a//b", "chroot '/a//b' is not a valid ZooKeeper path"),
        ("zk1:2181, zk2:2181", "contains whitespace"),
        ("zk 1:2181", "contains whitespace"),
        ("bad$host:2181", "has an invalid host name"),
    ],
)
def test_bad_connect_string(connect: str, problem: str) -> None:
    err = error_of(lambda d: d["zookeeper"].update(connect=connect))
    assert err.key_path == "zookeeper.connect"
    assert problem in err.problem
    assert err.fix


@pytest.mark.parametrize(
    "connect", ["localhost:2181", "a:1,b.example.com:2182/jk", "[::1]:2181/a/b", "10.0.0.1:2181"]
)
def test_good_connect_strings(connect: str) -> None:
    data = minimal()
    data["zookeeper"]["connect"] = connect
    assert parse_config(data, env={}).zookeeper.connect == connect


@pytest.mark.parametrize(
    ("topics", "path", "problem"),
    [
        ([], "channel.topics", "must not be an empty list"),
        (["ok", "not ok"], "channel.topics[1]", "'not ok' is not a valid Kafka topic name"),
        (["a" * 250], "channel.topics[0]", "Kafka allows at most 249"),
        (["orders", "orders"], "channel.topics[1]", "'orders' is listed more than once"),
        ([".."], "channel.topics[0]", "is not a valid Kafka topic name"),
    ],
)
def test_bad_topics(topics: list[str], path: str, problem: str) -> None:
    err = error_of(lambda d: d["channel"].update(topics=topics))
    assert err.key_path == path
    assert problem in err.problem


@pytest.mark.parametrize(
    ("group", "problem"), [("", "must not be empty"), ("a/b", "contains '/'"), ("..", "not a valid")]
)
def test_bad_group(group: str, problem: str) -> None:
    err = error_of(lambda d: d["channel"].update(group=group))
    assert err.key_path == "channel.group"
    assert problem in err.problem


def test_processor_class_key_and_format() -> None:
    err = error_of(lambda d: d.update(processor={"class_path": "a:B"}))
    assert err.key_path == "processor.class_path"
    assert "Did you mean 'class'?" in err.problem
    err = error_of(lambda d: d.update(processor={"class": "just.a.module"}))
    assert err.key_path == "processor.class"
    assert "'package.module:ClassName'" in err.problem
    err = error_of(lambda d: d.update(processor={}))
    assert err.key_path == "processor.class"
    assert err.problem.startswith("required key is missing")


def test_non_string_keys() -> None:
    err = error_of(lambda d: d["channel"].update({1: "x"}))
    assert err.key_path == "channel.1"
    assert "keys must be strings" in err.problem

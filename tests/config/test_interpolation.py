"""``${VAR}`` interpolation, and secrets kept out of messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetkafka.config import config_to_dict, load_config, parse_config
from tests.config import error_of, minimal


def test_variables_in_any_string_value(tmp_path: Path) -> None:
    path = tmp_path / "jk.yaml"
    path.write_text(
        "zookeeper:\n  connect: ${ZK:-localhost:2181}/jk\n"
        "kafka:\n  bootstrap.servers: ${BROKERS}\n  client.id: app-${ENVIRONMENT}\n"
        "channel:\n  group: g\n  topics: ['${TOPIC}', literal]\n"
        "processor:\n  class: m:C\n  options:\n    url: http://${HOST}/x\n    nested: [{k: '${HOST}'}]\n"
    )
    env = {"BROKERS": "b1:9092,b2:9092", "ENVIRONMENT": "prod", "TOPIC": "orders", "HOST": "h"}
    config = load_config(path, env=env)
    assert config.zookeeper.connect == "localhost:2181/jk"
    assert config.kafka["bootstrap.servers"] == "b1:9092,b2:9092"
    assert config.kafka["client.id"] == "app-prod"
    assert config.channel.topics == ("orders", "literal")
    assert config.processor is not None
    assert config.processor.options["url"] == "http://h/x"
    assert config.processor.options["nested"] == [{"k": "h"}]
    assert type(config.kafka["client.id"]) is str


def test_os_environ_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JK_TEST_GROUP", "from-env")
    data = minimal()
    data["channel"]["group"] = "${JK_TEST_GROUP}"
    assert parse_config(data).channel.group == "from-env"


def test_default_applies_when_unset_or_empty() -> None:
    data = minimal()
    data["channel"]["group"] = "${G:-fallback}"
    assert parse_config(data, env={}).channel.group == "fallback"
    assert parse_config(data, env={"G": ""}).channel.group == "fallback"
    assert parse_config(data, env={"G": "set"}).channel.group == "set"


def test_escape_gives_a_literal() -> None:
    data = minimal()
    data["processor"] = {"class": "m:C", "options": {"template": "$${NOT_A_VAR} costs $5"}}
    config = parse_config(data, env={})
    assert config.processor is not None
    assert config.processor.options["template"] == "${NOT_A_VAR} costs $5"


def test_unset_variable_names_key_and_variable() -> None:
    err = error_of(lambda d: d["zookeeper"].update(auth={"credential": "${ZK_SECRET}"}))
    assert str(err) == (
        "test.yaml: zookeeper.auth.credential: environment variable ZK_SECRET is not set\n"
        "  fix: export it, or write ${ZK_SECRET:-default}"
    )


def test_unset_variable_inside_kafka_and_lists() -> None:
    err = error_of(lambda d: d["kafka"].update({"sasl.password": "${KAFKA_PASSWORD}"}))
    assert err.key_path == "kafka.sasl.password"
    assert "KAFKA_PASSWORD is not set" in err.problem
    err = error_of(lambda d: d["channel"].update(topics=["a", "${T}"]))
    assert err.key_path == "channel.topics[1]"


@pytest.mark.parametrize("text", ["${UNCLOSED", "${1ABC}", "${A-b}", "${}"])
def test_malformed_reference(text: str) -> None:
    err = error_of(lambda d: d["channel"].update(group=text))
    assert err.key_path == "channel.group"
    assert "$${" in err.fix


def test_interpolated_values_fill_number_and_boolean_fields() -> None:
    data = minimal()
    data["channel"].update(threads="${THREADS:-8}", commit_to_kafka="${MIRROR}", rebalance_interval_s="${R}")
    channel = parse_config(data, env={"MIRROR": "true", "R": "2.5"}).channel
    assert (channel.threads, channel.commit_to_kafka, channel.rebalance_interval_s) == (8, True, 2.5)


def test_interpolated_value_of_the_wrong_type_names_the_variable() -> None:
    err = error_of(lambda d: d["channel"].update(threads="${THREADS}"), env={"THREADS": "many"})
    assert err.problem == "expected an integer, got 'many' (a string, from ${THREADS})"
    err = error_of(lambda d: d["channel"].update(threads="${THREADS}"), env={"THREADS": "0"})
    assert err.problem == "0 is out of range 1..256"


def test_secret_values_never_appear_in_errors() -> None:
    secret = "s3cr3t-value"
    cases = [
        lambda d: d["zookeeper"].update(auth={"credential": [secret]}),
        lambda d: d["kafka"].update({"sasl.password": [secret]}),
        lambda d: d["kafka"].update({"sasl.jaas.config": {"x": secret}}),
        lambda d: d["kafka"].update({"ssl.key.password": "${X"}),
        lambda d: d["kafka"].update({"ssl.key.password": "${X}" + secret}),
    ]
    for case in cases:
        err = error_of(case)
        assert secret not in str(err), str(err)
        assert "${X" not in err.problem or "secret" in err.problem


def test_repr_and_dump_mask_secrets() -> None:
    data = minimal()
    data["zookeeper"]["auth"] = {"credential": "jk:pw-123"}
    data["kafka"]["sasl.password"] = "pw-456"
    config = parse_config(data, env={})
    assert "pw-123" not in repr(config) and "pw-456" not in repr(config)
    dumped = config_to_dict(config)
    assert dumped["zookeeper"]["auth"]["credential"] == "***"
    assert dumped["kafka"]["sasl.password"] == "***"
    assert config_to_dict(config, mask_secrets=False)["kafka"]["sasl.password"] == "pw-456"
    assert config.zookeeper.auth is not None and config.zookeeper.auth.credential == "jk:pw-123"


def test_dict_and_file_give_the_same_result(tmp_path: Path) -> None:
    path = tmp_path / "jk.yaml"
    path.write_text(
        "zookeeper: {connect: 'localhost:2181'}\nkafka: {bootstrap.servers: 'localhost:9092'}\n"
        "channel: {group: orders-indexer, topics: [orders]}\n"
    )
    from_file = load_config(path, env={})
    assert parse_config(minimal(), str(path), env={}) == from_file

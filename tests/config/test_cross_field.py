"""Rules that tie several keys of a section together."""

from __future__ import annotations

import dataclasses

import pytest

from jetkafka.config import ChannelConfig, Invalid, parse_config
from tests.config import SOURCE, error_of, minimal


def test_fixed_count_without_fixed_count_coordinator() -> None:
    err = error_of(lambda d: d["channel"].update(fixed_count=3))
    assert err.key_path == "channel.fixed_count"
    assert err.problem == "is only used with coordinator: fixed-count, but coordinator is dynamic"
    assert err.fix == "remove fixed_count, or set coordinator: fixed-count"


def test_fixed_count_coordinator_needs_fixed_count() -> None:
    err = error_of(lambda d: d["channel"].update(coordinator="fixed-count"))
    assert err.key_path == "channel.fixed_count"
    assert err.problem == "required when coordinator is fixed-count"
    assert "fixed_count: 3" in err.fix


def test_fixed_count_range() -> None:
    err = error_of(lambda d: d["channel"].update(coordinator="fixed-count", fixed_count=0))
    assert err.problem == "0 is out of range 1.."


def test_static_without_partitions() -> None:
    err = error_of(lambda d: d["channel"].update(coordinator="static"))
    assert err.key_path == "channel.partitions"
    assert err.problem == "required when coordinator is static"
    assert "partitions: {orders: [0, 1]}" in err.fix


def test_partitions_without_static() -> None:
    err = error_of(lambda d: d["channel"].update(partitions={"orders": [0]}))
    assert err.key_path == "channel.partitions"
    assert "only used with coordinator: static" in err.problem


def test_partitions_naming_a_topic_not_in_topics() -> None:
    err = error_of(lambda d: d["channel"].update(coordinator="static", partitions={"order": [0]}))
    assert err.key_path == "channel.partitions.order"
    assert err.problem == "topic 'order' is not in channel.topics (orders)"
    assert "did you mean 'orders'?" in err.fix


@pytest.mark.parametrize(
    ("partitions", "path", "problem"),
    [
        ({"orders": [0, -1]}, "channel.partitions.orders[1]", "-1 is out of range 0.."),
        ({"orders": [1, 1]}, "channel.partitions.orders[1]", "1 is listed more than once"),
        ({"orders": []}, "channel.partitions.orders", "must not be an empty list"),
        ({"orders": 3}, "channel.partitions.orders", "expected a list, got 3 (an integer)"),
        ({}, "channel.partitions", "must not be empty"),
    ],
)
def test_bad_static_partitions(partitions: object, path: str, problem: str) -> None:
    err = error_of(lambda d: d["channel"].update(coordinator="static", partitions=partitions))
    assert err.key_path == path
    assert problem in err.problem


def test_static_partitions_are_stored_immutably() -> None:
    data = minimal()
    data["channel"].update(topics=["orders", "returns"], coordinator="static", partitions={"orders": [2, 0]})
    channel = parse_config(data, SOURCE, env={}).channel
    assert channel.partitions == {"orders": (2, 0)}
    assert channel.partitions is not None
    with pytest.raises(TypeError):
        channel.partitions["returns"] = (1,)  # type: ignore[index]


def test_buffer_smaller_than_batch() -> None:
    err = error_of(lambda d: d["channel"].update(batch_max_events=1000, buffer_max_events=999))
    assert err.key_path == "channel.buffer_max_events"
    assert "999 is smaller than batch_max_events (1000)" in err.problem
    assert "at least 1000" in err.fix


def test_backoff_max_below_backoff() -> None:
    err = error_of(lambda d: d["channel"].update(error_backoff_ms=1000, error_backoff_max_ms=10))
    assert err.key_path == "channel.error_backoff_max_ms"
    assert "smaller than error_backoff_ms (1000)" in err.problem


def test_cross_field_rules_also_guard_direct_construction_and_replace() -> None:
    channel = ChannelConfig(group="g", topics=["orders"])  # type: ignore[arg-type]
    assert channel.topics == ("orders",)
    with pytest.raises(Invalid) as caught:
        dataclasses.replace(channel, coordinator="static")
    assert caught.value.key == "partitions"


def test_zookeeper_credential_shape_is_checked_without_echoing_it() -> None:
    err = error_of(lambda d: d["zookeeper"].update(auth={"credential": "nocolonsecret"}))
    assert err.key_path == "zookeeper.auth.credential"
    assert err.problem == "must have the form user:password"
    assert "nocolonsecret" not in str(err)


def test_zookeeper_auth_scheme() -> None:
    err = error_of(lambda d: d["zookeeper"].update(auth={"credential": "u:p", "scheme": "sasl"}))
    assert err.key_path == "zookeeper.auth.scheme"
    assert err.problem == "'sasl' is not one of digest"


def test_lease_margin_must_leave_the_lease_most_of_the_session() -> None:
    err = error_of(lambda d: d["zookeeper"].update(session_timeout_s=10, lease_margin_s=5))
    assert err.key_path == "zookeeper.lease_margin_s"
    assert err.problem == "5 is not below half of session_timeout_s (10)"
    assert "lower lease_margin_s" in err.fix
    config = parse_config({**minimal(), "zookeeper": {"connect": "localhost:2181", "session_timeout_s": 10}})
    assert config.zookeeper.lease_margin == 2  # a fifth of the session timeout by default

"""``check_config``: every error of a file at once (``jetkafka validate``), while
``load_config`` still raises the first alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetkafka.config import check_config, load_config, parse_config
from jetkafka.errors import ConfigError

VALID = """\
zookeeper:
  connect: 127.0.0.1:2181
kafka:
  bootstrap.servers: 127.0.0.1:9092
channel:
  group: orders
  topics: [orders]
"""

# Four mistakes in three sections, one of them in a nested section.
WRONG = """\
zookeeper:
  connect: 127.0.0.1:2181
  sesion_timeout_s: 10
  auth: {scheme: digest}
kafka:
  bootstrap.servers: 127.0.0.1:9092
channel:
  group: orders
  topics: [orders]
  threads: many
  colour: blue
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_a_valid_file_gives_the_configuration_and_no_errors(tmp_path: Path) -> None:
    config, errors = check_config(write(tmp_path, VALID))
    assert errors == []
    assert config is not None and config.channel.group == "orders"
    assert config == load_config(tmp_path / "c.yaml")


def test_every_wrong_key_is_reported_in_file_order(tmp_path: Path) -> None:
    config, errors = check_config(write(tmp_path, WRONG))
    assert config is None
    # A missing key is reported at the line of its section (auth: on line 4).
    assert [(e.line, e.key_path) for e in errors] == [
        (3, "zookeeper.sesion_timeout_s"),
        (4, "zookeeper.auth.credential"),
        (10, "channel.threads"),
        (11, "channel.colour"),
    ]
    assert all(isinstance(e, ConfigError) and e.source == str(tmp_path / "c.yaml") for e in errors)
    assert "Did you mean 'session_timeout_s'" in errors[0].problem
    assert str(errors[2]).startswith(f"{tmp_path / 'c.yaml'}:10: channel.threads: expected an integer")


# Sections, and keys within a section, in another order than the schema's; an unknown key
# before a wrong value, and the errors of a list item and a mapping entry between them.
SHUFFLED = """channel:
  topics: [orders, 'bad/topic']
  coordinator: dynamc
  colour: blue
  threads: many
  group: orders
kafka:
  bootstrap.servers: 127.0.0.1:9092
  fetch.max.bytes: [1]
zookeeper:
  session_timeout_s: 1
  connect: 127.0.0.1:2181
"""


def test_errors_follow_the_lines_of_the_file_not_the_order_of_the_schema(tmp_path: Path) -> None:
    _, errors = check_config(write(tmp_path, SHUFFLED))
    assert [(e.line, e.key_path) for e in errors] == [
        (2, "channel.topics[1]"),
        (3, "channel.coordinator"),
        (4, "channel.colour"),
        (5, "channel.threads"),
        (9, "kafka.fetch.max.bytes"),
        (11, "zookeeper.session_timeout_s"),
    ]
    assert [str(e).split(": ")[0] for e in errors] == [f"{tmp_path / 'c.yaml'}:{n}" for n in (2, 3, 4, 5, 9, 11)]


def test_a_missing_section_has_no_line_and_comes_last(tmp_path: Path) -> None:
    text = "channel:\n  group: orders\n  topics: [orders]\n  threads: 0\nzookeeper:\n  connect: 127.0.0.1:2181\n"
    _, errors = check_config(write(tmp_path, text))
    assert [(e.line, e.key_path) for e in errors] == [(4, "channel.threads"), (None, "kafka")]
    assert str(errors[1]).startswith(f"{tmp_path / 'c.yaml'}: kafka: required section is missing")


def test_an_unset_variable_names_its_line(tmp_path: Path) -> None:
    text = VALID.replace("127.0.0.1:9092", "${NOT_SET_ANYWHERE_2}")
    _, [error] = check_config(write(tmp_path, text), env={})
    assert (error.line, error.key_path) == (4, "kafka.bootstrap.servers")


def test_data_from_a_dict_has_no_lines() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"zookeeper": {"connect": "h:1"}, "kafka": {}, "channel": {"group": "g", "topics": ["t"], "threads": 0}})
    assert raised.value.line is None
    assert str(raised.value).startswith("<dict>: channel.threads: 0 is out of range")


def test_load_config_still_raises_the_first_error_alone(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, WRONG))
    assert raised.value.key_path == "zookeeper.sesion_timeout_s"
    # The first of the file, not of the schema's walk (channel comes before zookeeper here).
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, SHUFFLED))
    assert (raised.value.line, raised.value.key_path) == (2, "channel.topics[1]")


def test_a_missing_required_section_and_a_wrong_key_are_both_reported(tmp_path: Path) -> None:
    text = VALID.replace("  group: orders\n", "  group: orders\n  threads: 0\n")
    _, errors = check_config(write(tmp_path, text.replace("kafka:\n  bootstrap.servers: 127.0.0.1:9092\n", "")))
    assert sorted(e.key_path for e in errors) == ["channel.threads", "kafka"]


def test_a_cross_key_error_is_reported_beside_errors_of_other_sections(tmp_path: Path) -> None:
    text = VALID.replace("  connect: 127.0.0.1:2181\n", "  connect: 127.0.0.1:2181\n  lease_margin_s: -1\n")
    text += "  coordinator: fixed-count\n"
    _, errors = check_config(write(tmp_path, text))
    assert [e.key_path for e in errors] == ["zookeeper.lease_margin_s", "channel.fixed_count"]
    assert "required when coordinator is fixed-count" in errors[1].problem


def test_a_cross_key_check_waits_for_the_keys_of_its_section(tmp_path: Path) -> None:
    # fixed_count is missing too, but that check needs a valid section: threads is reported alone.
    _, errors = check_config(write(tmp_path, VALID + "  coordinator: fixed-count\n  threads: many\n"))
    assert [e.key_path for e in errors] == ["channel.threads"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [("channel: [unclosed\n", "invalid YAML"), ("", "the configuration is empty"), ("x: ${NOT_SET_ANYWHERE_1}\n", "NOT_SET_ANYWHERE_1")],
)
def test_a_file_that_cannot_be_read_as_data_is_one_error(tmp_path: Path, text: str, problem: str) -> None:
    config, errors = check_config(write(tmp_path, text), env={})
    assert config is None and len(errors) == 1
    assert problem in str(errors[0])


def test_a_missing_file_is_one_error(tmp_path: Path) -> None:
    config, errors = check_config(tmp_path / "absent.yaml")
    assert config is None and [e.problem for e in errors] == ["file not found"]


def test_every_wrong_entry_of_a_mapping_and_item_of_a_list_is_reported(tmp_path: Path) -> None:
    text = VALID.replace("  bootstrap.servers: 127.0.0.1:9092\n", "  bootstrap.servers: 127.0.0.1:9092\n  a.b: [1]\n  c.d: {e: 1}\n")
    text = text.replace("  topics: [orders]\n", "  topics: [orders, 'bad topic', 'bad/too']\n")
    _, errors = check_config(write(tmp_path, text))
    assert [e.key_path for e in errors] == ["kafka.a.b", "kafka.c.d", "channel.topics[1]", "channel.topics[2]"]

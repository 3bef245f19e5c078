"""Errors about the file itself, and YAML syntax errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jetkafka.config import JetkafkaConfig, load_config, parse_config
from jetkafka.config import _loader as loader
from jetkafka.errors import ConfigError

VALID = """\
zookeeper:
  connect: localhost:2181
kafka:
  bootstrap.servers: localhost:9092
channel:
  group: g
  topics: [orders]
"""


def write(tmp_path: Path, text: str, name: str = "jk.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_file_records_its_source(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    config = load_config(path)
    assert config.source == str(path)
    assert JetkafkaConfig.from_yaml(path) == config


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    err = caught.value
    assert err.source == str(path)
    assert "file not found" in str(err)
    assert "config/orders.yaml" in err.fix


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory, not a file"):
        load_config(tmp_path)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, VALID)
    if os.geteuid() == 0:
        # root reads any file regardless of mode, so make open() fail as it would for a user.
        def refuse(*args: object, **kwargs: object) -> None:
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(loader, "open", refuse, raising=False)
    else:
        path.chmod(0)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "permission denied" in caught.value.problem
    assert "read access" in caught.value.fix


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("channel:\n  group: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "not UTF-8" in caught.value.problem
    assert "0xe9" in caught.value.problem


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n# and another\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert "empty" in caught.value.problem
    assert "config/" in caught.value.fix


@pytest.mark.parametrize(
    ("text", "kind"), [("- a\n- b\n", "a list"), ("just text\n", "a string"), ("42\n", "an integer")]
)
def test_top_level_not_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert "top level must be a mapping" in caught.value.problem
    assert kind in caught.value.problem


def test_parse_config_rejects_non_mapping() -> None:
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        parse_config(["a"], "x")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "line", "column", "fix_fragment"),
    [
        # an unquoted value containing ': '
        (VALID + "  note: time: 10:00\n", 8, 13, "quote a value that contains ': '"),
        # a key indented one space too little
        ("channel:\n  group: g\n topics: [a]\n", 3, 2, "indentation"),
        ("channel:\n\tgroup: g\n", 2, 1, "spaces"),
        ("channel:\n  topics: [a, b\n", 3, 1, "close"),
        ("channel:\n  group: 'orders\n", 3, 1, "close the quote"),
        ("a: 1\n---\nb: 2\n", 2, 1, "one YAML document"),
    ],
)
def test_yaml_syntax_error(tmp_path: Path, text: str, line: int, column: int, fix_fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    err = caught.value
    assert err.key_path == ""
    assert f"invalid YAML at line {line}, column {column}" in err.problem
    assert fix_fragment in err.fix
    assert "Traceback" not in str(err)


def test_yaml_error_shows_the_line_with_a_caret(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "channel:\n  group: a: b\n"))
    assert "\n      group: a: b\n" in caught.value.problem
    assert caught.value.problem.rstrip().endswith("^")


def test_yaml_error_never_echoes_a_secret_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "kafka:\n  sasl.password: hunter2: x\n"))
    assert "hunter2" not in str(caught.value)
    assert "line 2" in caught.value.problem


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + VALID.encode())
    assert load_config(path).channel.group == "g"

"""``jetkafka validate`` (jetkafka._validation and the command): the file, the kafka: section as
librdkafka sees it, and the processor built as ``run`` builds it, all without connecting."""

from __future__ import annotations

import io
import json
import uuid
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import yaml

from jetkafka._validation import validate_file
from jetkafka.cli import main
from jetkafka.errors import ConfigError, ProcessorError

# Nothing listens on port 1: a check that tried to connect would fail or hang, not pass.
BASE = {
    "zookeeper": {"connect": "127.0.0.1:1"},
    "kafka": {"bootstrap.servers": "127.0.0.1:1"},
    "channel": {"group": "orders", "topics": ["orders"]},
}

PROCESSOR = '''
from pathlib import Path
from jetkafka import BatchEventProcessor, BatchResponse


class Indexer(BatchEventProcessor):
    def __init__(self, marker: str, size: int = 1) -> None:
        Path(marker).write_text("built")
        self.marker = marker

    def on_start(self) -> None:
        Path(self.marker).write_text("started")

    def on_next_batch(self, source, events):
        return BatchResponse.advance()
'''


def write(tmp_path: Path, **sections: object) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, **sections}))
    return path


def processor_module(tmp_path: Path) -> str:
    name = f"validated_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PROCESSOR)
    return name


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_a_misspelt_kafka_property_is_named_by_librdkafka(tmp_path: Path) -> None:
    path = write(tmp_path, kafka={"bootstrap.servers": "127.0.0.1:1", "fetch.max.bytez": 1000})
    report = validate_file(path, build_processor=False)
    assert not report.ok
    [error] = report.errors
    assert isinstance(error, ConfigError)
    assert error.key_path == "kafka.fetch.max.bytez"
    assert "No such configuration property" in error.problem


def test_a_wrongly_typed_kafka_property_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, kafka={"bootstrap.servers": "127.0.0.1:1", "fetch.max.bytes": "lots"})
    [error] = validate_file(path, build_processor=False).errors
    assert isinstance(error, ConfigError) and error.key_path == "kafka.fetch.max.bytes"
    assert "'lots'" in error.fix


def test_a_producer_property_is_a_warning_not_an_error(tmp_path: Path) -> None:
    report = validate_file(write(tmp_path, kafka={"bootstrap.servers": "127.0.0.1:1", "linger.ms": 5}), build_processor=False)
    assert report.ok
    assert any("producer property" in w for w in report.warnings)


def test_the_processor_is_built_with_its_options_but_not_started(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    module = processor_module(tmp_path)
    path = write(tmp_path, processor={"class": f"{module}:Indexer", "options": {"marker": str(marker)}})
    report = validate_file(path, pythonpath=[str(tmp_path)])
    assert report.ok, report.errors
    assert marker.read_text() == "built"


def test_a_processor_that_cannot_be_built_is_an_error(tmp_path: Path) -> None:
    module = processor_module(tmp_path)
    path = write(tmp_path, processor={"class": f"{module}:Indexer", "options": {"markr": "x"}})
    [error] = validate_file(path, pythonpath=[str(tmp_path)]).errors
    assert isinstance(error, ProcessorError)
    assert "'markr'" in str(error) and "'marker'" in str(error)


def test_the_recovery_processor_is_built_too(tmp_path: Path) -> None:
    module = processor_module(tmp_path)
    path = write(
        tmp_path,
        processor={"class": f"{module}:Indexer", "options": {"marker": str(tmp_path / "m")}},
        recovery={"max_partition_lag": 1000, "processor": {"class": f"{module}:Missing"}},
    )
    [error] = validate_file(path, pythonpath=[str(tmp_path)]).errors
    assert "has no attribute 'Missing'" in str(error)


def test_without_a_processor_section_validate_says_so_unless_skipped(tmp_path: Path) -> None:
    path = write(tmp_path)
    [error] = validate_file(path).errors
    assert isinstance(error, ConfigError) and error.key_path == "processor"
    assert validate_file(path, build_processor=False).ok


def test_the_command_prints_every_error_and_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path, channel={"group": "orders", "topics": ["orders"], "threads": "many", "colour": "blue"})
    code, out, err = cli("validate", str(path))
    assert code == 2 and out == ""
    assert "channel.threads" in err and "channel.colour" in err
    assert err.endswith(f"{path}: 2 errors\n")
    assert "Traceback" not in err


def test_the_command_as_json(tmp_path: Path) -> None:
    path = write(tmp_path, kafka={"bootstrap.servers": "127.0.0.1:1", "fetch.max.bytez": 1})
    code, out, _ = cli("validate", "--json", "--skip-processor", str(path))
    assert code == 2
    data = json.loads(out)
    assert data["valid"] is False and data["file"] == str(path) and data["group"] == "orders"
    assert [e["key"] for e in data["errors"]] == ["kafka.fetch.max.bytez"]
    assert set(data["errors"][0]) == {"key", "problem", "fix", "message"}

    code, out, _ = cli("validate", "--json", "--skip-processor", str(write(tmp_path)))
    assert code == 0
    assert json.loads(out) == {
        "file": str(tmp_path / "c.yaml"),
        "valid": True,
        "errors": [],
        "warnings": [],
        "group": "orders",
        "topics": ["orders"],
        "coordinator": "dynamic",
    }


def test_an_invalid_file_as_json_has_no_group(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("channel: [unclosed\n")
    code, out, _ = cli("validate", "--json", str(path))
    data = json.loads(out)
    assert code == 2 and "group" not in data and "invalid YAML" in data["errors"][0]["problem"]

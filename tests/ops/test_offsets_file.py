"""The offsets file of ``offsets export`` / ``offsets import``: its format and its validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jetkafka.errors import JetkafkaError
from jetkafka.ops._offsets_file import (
    FORMAT,
    VERSION,
    OffsetsFileError,
    PartitionOffset,
    dump_offsets_file,
    parse_offsets_file,
    read_offsets_file,
)


def valid(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "group": "orders",
        "exported_at": "2026-11-26T11:00:00Z",
        "offsets": [{"topic": "t", "partition": 1, "offset": 7}, {"topic": "t", "partition": 0, "offset": 3}],
    }
    data.update(changes)
    return data


def problems(data: Any) -> list[str]:
    with pytest.raises(OffsetsFileError) as caught:
        parse_offsets_file(json.dumps(data), "f.json")
    return caught.value.problems


def test_dump_then_parse_round_trips_sorted() -> None:
    text = dump_offsets_file("g", {"b": {1: 5, 0: 4}, "a": {2: 0}}, now=0)
    data = json.loads(text)
    assert data == {
        "format": "jetkafka-offsets",
        "version": 1,
        "group": "g",
        "exported_at": "1970-01-01T00:00:00Z",
        "offsets": [
            {"topic": "a", "partition": 2, "offset": 0},
            {"topic": "b", "partition": 0, "offset": 4},
            {"topic": "b", "partition": 1, "offset": 5},
        ],
    }
    parsed = parse_offsets_file(text)
    assert parsed.group == "g"
    assert parsed.offsets == (PartitionOffset("a", 2, 0), PartitionOffset("b", 0, 4), PartitionOffset("b", 1, 5))


def test_a_valid_file_parses_and_exported_at_may_be_null() -> None:
    parsed = parse_offsets_file(json.dumps(valid(exported_at=None)))
    assert parsed.offsets == (PartitionOffset("t", 0, 3), PartitionOffset("t", 1, 7))
    assert parse_offsets_file(json.dumps(valid(offsets=[]))).offsets == ()


def test_not_json_names_line_and_column() -> None:
    with pytest.raises(OffsetsFileError, match=r"not JSON: .* line 2 column"):
        parse_offsets_file('{\n  "format": }', "f.json")


def test_top_level_must_be_an_object() -> None:
    assert problems([1, 2]) == ["expected a JSON object at the top, got list"]


def test_wrong_format_and_future_version_are_named() -> None:
    found = problems(valid(format="kafka", version=2))
    assert "format: expected 'jetkafka-offsets', got 'kafka'" in found
    assert "version: this jetkafka reads version 1, the file says 2" in found
    assert problems(valid(version=True)) == ["version: this jetkafka reads version 1, the file says True"]


def test_unknown_keys_are_refused() -> None:
    data = valid(extra=1)
    data["offsets"][0]["leader"] = 3
    found = problems(data)
    assert any(p.startswith("extra: unknown key") for p in found)
    assert any(p.startswith("offsets[0].leader: unknown key") for p in found)


def test_every_bad_entry_is_reported_at_once() -> None:
    data = valid(
        group="",
        offsets=[
            {"topic": "t", "partition": -1, "offset": 3},
            {"topic": "", "partition": 0, "offset": "12"},
            {"topic": "t", "partition": True, "offset": 1.5},
            {"partition": 0},
            "t:0:1",
        ],
    )
    found = problems(data)
    assert found == [
        "group: expected the non-empty name of a group (no '/'), got ''",
        "offsets[0].partition: expected an integer >= 0, got -1",
        "offsets[1].topic: expected a topic name (non-empty, no '/'), got ''",
        "offsets[1].offset: expected an integer >= 0 (the next offset to read), got '12'",
        "offsets[2].partition: expected an integer >= 0, got True",
        "offsets[2].offset: expected an integer >= 0 (the next offset to read), got 1.5",
        "offsets[3].offset: missing",
        "offsets[3].topic: missing",
        "offsets[4]: expected an object with topic, partition and offset, got 't:0:1'",
    ]


def test_a_partition_given_twice_is_refused() -> None:
    data = valid(offsets=[{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2}])
    assert problems(data) == ["offsets[1]: t[0] is already given by offsets[0]"]


def test_offsets_must_be_a_list_and_group_has_no_slash() -> None:
    found = problems(valid(offsets={"t": 1}, group="a/b"))
    assert found[0] == "group: expected the non-empty name of a group (no '/'), got 'a/b'"
    assert found[1].startswith("offsets: expected a list of {topic, partition, offset}")


def test_the_error_message_lists_every_problem_and_is_a_jetkafka_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(valid(format="x", offsets=[{"topic": "t", "partition": 0, "offset": -5}])))
    with pytest.raises(JetkafkaError) as caught:
        read_offsets_file(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path} is not a valid offsets file (format jetkafka-offsets version 1):")
    assert "\n  format: expected" in message
    assert "\n  offsets[0].offset: expected an integer >= 0" in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(OffsetsFileError, match=r"nope.json is not a valid offsets file.*\n  cannot read it: No such file"):
        read_offsets_file(str(tmp_path / "nope.json"))

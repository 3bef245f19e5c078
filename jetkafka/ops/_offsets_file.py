"""The JSON file of ``jetkafka offsets export`` and ``offsets import``: a group's committed offsets.

Format, version 1 (documented in docs/operations.md; keep the two in step)::

    {
      "format": "jetkafka-offsets",
      "version": 1,
      "group": "orders",
      "exported_at": "2026-11-26T11:30:00Z",
      "offsets": [
        {"topic": "orders", "partition": 0, "offset": 1042},
        {"topic": "orders", "partition": 1, "offset": 977}
      ]
    }

``offset`` is what jetkafka commits: the next offset to read. ``group`` names the group the
offsets were exported from; an import writes them into the group it is told to, whatever the
file says. ``exported_at`` is informative. Unknown keys are refused rather than ignored: a
file written by a newer version must not be half understood. A later, incompatible format
gets a new ``version``; :func:`parse_offsets_file` names the versions it reads.

Validation reports every problem of a file at once, each with its place
(``offsets[3].partition: ...``), as one :class:`OffsetsFileError`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jetkafka.errors import JetkafkaError

__all__ = [
    "FORMAT",
    "VERSION",
    "OffsetsFile",
    "OffsetsFileError",
    "PartitionOffset",
    "dump_offsets_file",
    "parse_offsets_file",
    "read_offsets_file",
]

FORMAT = "jetkafka-offsets"
VERSION = 1

_TOP_KEYS = {"format", "version", "group", "exported_at", "offsets"}
_ENTRY_KEYS = {"topic", "partition", "offset"}


class OffsetsFileError(JetkafkaError):
    """An offsets file that cannot be read or is not valid; the message lists every problem."""

    def __init__(self, source: str, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{source} is not a valid offsets file (format {FORMAT} version {VERSION}):\n{lines}")


@dataclass(frozen=True, order=True)
class PartitionOffset:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class OffsetsFile:
    """A parsed offsets file: the group it came from and its offsets, sorted by topic and partition."""

    group: str
    offsets: tuple[PartitionOffset, ...]
    exported_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "group": self.group,
            "exported_at": self.exported_at,
            "offsets": [{"topic": o.topic, "partition": o.partition, "offset": o.offset} for o in self.offsets],
        }


def dump_offsets_file(group: str, offsets: Mapping[str, Mapping[int, int]], now: float | None = None) -> str:
    """The file's text for ``offsets`` (topic -> partition -> offset) of ``group``."""
    at = dt.datetime.now(dt.UTC) if now is None else dt.datetime.fromtimestamp(now, dt.UTC)
    entries = tuple(sorted(PartitionOffset(t, p, o) for t, ps in offsets.items() for p, o in ps.items()))
    data = OffsetsFile(group, entries, at.isoformat(timespec="seconds").replace("+00:00", "Z")).to_dict()
    return json.dumps(data, indent=2) + "\n"


def read_offsets_file(path: str) -> OffsetsFile:
    """Read and validate the file at ``path``; ``-`` is not special (give a file)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise OffsetsFileError(path, [f"cannot read it: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise OffsetsFileError(path, ["it is not UTF-8 text"]) from None
    return parse_offsets_file(text, path)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _natural(value: object) -> bool:
    """An integer >= 0 (JSON's true and false are not numbers here)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_offsets_file(text: str, source: str = "the offsets file") -> OffsetsFile:
    """Validate ``text`` as an offsets file; raise :class:`OffsetsFileError` naming every problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OffsetsFileError(source, [f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]) from None
    if not isinstance(data, dict):
        raise OffsetsFileError(source, [f"expected a JSON object at the top, got {type(data).__name__}"])
    problems: list[str] = []
    if data.get("format") != FORMAT:
        problems.append(f"format: expected {FORMAT!r}, got {data.get('format')!r}")
    version = data.get("version")
    if version != VERSION or not _is_int(version):
        problems.append(f"version: this jetkafka reads version {VERSION}, the file says {version!r}")
    for key in sorted(set(data) - _TOP_KEYS):
        problems.append(f"{key}: unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    group = data.get("group")
    if not isinstance(group, str) or not group or "/" in group:
        problems.append(f"group: expected the non-empty name of a group (no '/'), got {group!r}")
    exported_at = data.get("exported_at")
    if exported_at is not None and not isinstance(exported_at, str):
        problems.append(f"exported_at: expected a string or null, got {exported_at!r}")
    raw = data.get("offsets")
    entries: list[PartitionOffset] = []
    if not isinstance(raw, list):
        problems.append(f"offsets: expected a list of {{topic, partition, offset}}, got {raw!r}")
        raw = []
    seen: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(raw):
        where = f"offsets[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: expected an object with topic, partition and offset, got {entry!r}")
            continue
        bad = len(problems)
        for key in sorted(set(entry) - _ENTRY_KEYS):
            problems.append(f"{where}.{key}: unknown key (known: offset, partition, topic)")
        for key in sorted(_ENTRY_KEYS - set(entry)):
            problems.append(f"{where}.{key}: missing")
        topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
        if "topic" in entry and (not isinstance(topic, str) or not topic or "/" in topic):
            problems.append(f"{where}.topic: expected a topic name (non-empty, no '/'), got {topic!r}")
        if "partition" in entry and not _natural(partition):
            problems.append(f"{where}.partition: expected an integer >= 0, got {partition!r}")
        if "offset" in entry and not _natural(offset):
            problems.append(f"{where}.offset: expected an integer >= 0 (the next offset to read), got {offset!r}")
        if len(problems) > bad:
            continue
        assert isinstance(topic, str) and isinstance(partition, int) and isinstance(offset, int)
        first = seen.get((topic, partition))
        if first is not None:
            problems.append(f"{where}: {topic}[{partition}] is already given by offsets[{first}]")
            continue
        seen[(topic, partition)] = i
        entries.append(PartitionOffset(topic, partition, offset))
    if problems:
        raise OffsetsFileError(source, problems)
    assert isinstance(group, str)
    return OffsetsFile(group, tuple(sorted(entries)), exported_at)

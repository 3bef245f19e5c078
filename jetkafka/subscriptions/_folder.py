"""Reading a folder of channel files: which files, their configurations, and what is refused.

A folder run by ``jetkafka run DIR`` holds one YAML file per channel (a subscription: its
group, topics, processor and settings), named ``*.yaml`` or ``*.yml``, and optionally
``process.yaml`` with the settings the channels share (:mod:`._process_settings`). Files whose
name starts with a dot or ends with ``~`` are an editor's and are skipped; so are
subfolders.

:func:`read_folder` reads every file and decides, per file, the configuration its channel runs
on or the errors that refuse it. A file is refused when:

- it is invalid on its own (the errors of ``jetkafka validate FILE``, every one, with lines);
- a process section disagrees with the process's (:mod:`._process_settings`);
- its ``channel.group`` is another file's: two channels of one group in one process would
  split the group's partitions between themselves and show as one in every status and metric.
  The file already running keeps the group; of two new ones, the first in name order.

Reading never connects and never raises for a problem of a file; an unreadable folder raises
:class:`~jetkafka.errors.ConfigError` naming it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jetkafka.config import JetkafkaConfig, check_config
from jetkafka.config._loader import key_lines, parse_as, parse_yaml, read_source
from jetkafka.config._validate import SectionInvalid
from jetkafka.errors import ConfigError, JetkafkaError
from jetkafka.subscriptions._process_settings import (
    PROCESS_FILE,
    PROCESS_SECTIONS,
    ProcessSettings,
    read_process_file,
)


@dataclass
class FileReading:
    """One channel file as read: its configuration, or the errors that refuse it."""

    path: str
    digest: str
    config: JetkafkaConfig | None = None
    errors: list[JetkafkaError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.config is not None and not self.errors

    @property
    def name(self) -> str:
        return Path(self.path).name


@dataclass
class FolderReading:
    """A folder as read: ``process`` (``process.yaml``'s settings, None without the file),
    ``process_errors`` (when it is invalid), the settings the channels share (``shared``, by
    section, with the file each came from in ``shared_from``), and every channel file."""

    folder: str
    process: ProcessSettings | None
    process_errors: list[JetkafkaError]
    process_digest: str | None
    shared: dict[str, Any]
    shared_from: dict[str, str]
    files: list[FileReading]

    def valid(self) -> list[FileReading]:
        return [f for f in self.files if f.ok]


def channel_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The channel files of ``folder`` in name order (``process.yaml`` is not one)."""
    root = Path(folder)
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise ConfigError(
            os.fspath(folder), "", f"cannot read the folder: {exc.strerror or exc}", "give a readable folder of YAML files"
        ) from None
    return [
        p
        for p in entries
        if p.suffix in (".yaml", ".yml")
        and not p.name.startswith(".")
        and not p.name.endswith("~")
        and p.name != PROCESS_FILE
        and p.is_file()
    ]


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def read_folder(
    folder: str | os.PathLike[str],
    established: Mapping[str, tuple[Any, str]] | None = None,
    groups_taken: Mapping[str, str] | None = None,
) -> FolderReading:
    """Read ``folder`` (see the module docstring).

    ``established`` maps a process section to the values the running process has and the file
    they came from; sections it lacks are taken from the first valid file. ``groups_taken``
    maps a group to the file whose channel runs it.
    """
    root = Path(folder)
    files = channel_files(root)
    process_path = root / PROCESS_FILE
    process: ProcessSettings | None = None
    process_errors: list[JetkafkaError] = []
    process_digest: str | None = None
    if process_path.is_file():
        process_digest = _digest(process_path)
        process, process_errors = read_process_file(process_path)
    shared: dict[str, Any] = {}
    shared_from: dict[str, str] = {}
    for name, (value, origin) in (established or {}).items():
        shared[name], shared_from[name] = value, origin
    if process is not None:
        for name, value in process.given().items():
            shared[name], shared_from[name] = value, str(process_path)
    raw_sections = _raw_process_sections(process_path) if process is not None else {}
    readings = [_read_file(p, raw_sections) for p in files]
    for reading in readings:
        if reading.config is None:
            continue
        taken = set()
        for name in PROCESS_SECTIONS:
            if name not in shared:
                shared[name], shared_from[name] = getattr(reading.config, name), reading.path
                taken.add(name)
        _check_agreement(reading, shared, shared_from, taken)
    _check_groups(readings, groups_taken or {})
    return FolderReading(os.fspath(folder), process, process_errors, process_digest, shared, shared_from, readings)


def read_channel_file(path: str | os.PathLike[str]) -> tuple[JetkafkaConfig | None, list[JetkafkaError]]:
    """One channel file, read as ``jetkafka run DIR`` reads it: with the sections of the
    ``process.yaml`` beside it, if there is one (for the commands that take one file of a
    folder: ``status``, ``pause``, ``offsets`` ...). The configuration and no errors, or None
    and every error."""
    file = Path(path)
    process_path = file.parent / PROCESS_FILE
    sections: dict[str, Any] = {}
    if process_path.is_file() and file.name != PROCESS_FILE:
        _, process_errors = read_process_file(process_path)
        if process_errors:
            return None, process_errors  # its own errors, not the file's missing sections
        sections = _raw_process_sections(process_path)
    reading = _read_file(file, sections)
    return reading.config, reading.errors


def load_channel_file(path: str | os.PathLike[str]) -> JetkafkaConfig:
    """:func:`read_channel_file`, raising its first error (a
    :class:`~jetkafka.errors.ConfigError`): the loader of a watched file's changes."""
    config, errors = read_channel_file(path)
    if errors:
        raise errors[0]
    assert config is not None
    return config


def _raw_process_sections(path: Path) -> dict[str, Any]:
    """``process.yaml``'s sections as YAML data, to be read as part of each channel file."""
    try:
        data = parse_yaml(read_source(os.fspath(path)), os.fspath(path))
    except ConfigError:
        return {}
    return {k: v for k, v in data.items() if k in PROCESS_SECTIONS} if isinstance(data, Mapping) else {}


def _read_file(path: Path, process_sections: Mapping[str, Any]) -> FileReading:
    reading = FileReading(os.fspath(path), _digest(path))
    if not process_sections:
        config, found = check_config(path)
        reading.config, reading.errors = config, list(found)
        return reading
    # The file's own sections win; the agreement check then compares them to process.yaml's.
    source = os.fspath(path)
    errors: list[ConfigError] = []
    try:
        text = read_source(source)
        data = parse_yaml(text, source)
        if isinstance(data, Mapping):
            data = {**{k: v for k, v in process_sections.items() if k not in data}, **data}
        reading.config = parse_as(JetkafkaConfig, data, source, errors=errors, lines=key_lines(text))
    except SectionInvalid:
        errors.sort(key=lambda e: e.line if e.line is not None else math.inf)
        reading.errors = list(errors)
    except ConfigError as exc:
        reading.errors = [exc]
    return reading


def _check_agreement(
    reading: FileReading, shared: Mapping[str, Any], shared_from: Mapping[str, str], taken: set[str]
) -> None:
    """Refuse ``reading`` when a process section differs from the process's. Only a section
    taken from this very file in this reading is its own; once the process runs on it, the file
    that gave it must agree like any other (its edits there are refused: the process's
    settings change through ``process.yaml``)."""
    config = reading.config
    assert config is not None
    for name in PROCESS_SECTIONS:
        mine, theirs = getattr(config, name), shared[name]
        if name in taken or _comparable(mine) == _comparable(theirs):
            continue
        origin = shared_from[name]
        if Path(origin).name == PROCESS_FILE:
            fix = f"leave {name}: out of {reading.name} ({PROCESS_FILE} sets it for every channel), or make it equal"
        else:
            fix = (
                f"make {name}: equal to {Path(origin).name}'s, or move it into a {PROCESS_FILE} of the folder "
                f"(the one place to change what the process's channels share)"
            )
        reading.errors.append(
            ConfigError(
                reading.path,
                name,
                f"differs from the {name}: the process runs on (from {origin}); the channels of one process "
                f"share one {name}: {_difference(mine, theirs)}",
                fix,
            )
        )
    if reading.errors:
        reading.config = None


def _comparable(section: Any) -> Any:
    # Where a section was written is not part of its value.
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        values = {f.name: getattr(section, f.name) for f in dataclasses.fields(section) if f.name not in ("source", "origin")}
        return tuple(sorted((k, _comparable(v)) for k, v in values.items()))
    return section


def _difference(mine: Any, theirs: Any) -> str:
    if not (dataclasses.is_dataclass(mine) and dataclasses.is_dataclass(theirs)):
        return f"{mine!r} against {theirs!r}"
    parts = []
    for f in dataclasses.fields(mine):
        a, b = getattr(mine, f.name), getattr(theirs, f.name)
        if f.name not in ("source", "origin") and _comparable(a) != _comparable(b):
            shown = ("***", "***") if "auth" in f.name or "credential" in f.name else (a, b)
            parts.append(f"{f.name} {shown[0]!r} here, {shown[1]!r} there")
    return "; ".join(parts) or "they differ"


def _check_groups(readings: list[FileReading], groups_taken: Mapping[str, str]) -> None:
    owners: dict[str, str] = dict(groups_taken)  # a running channel keeps its group
    for reading in readings:
        if reading.config is None:
            continue
        group = reading.config.channel.group
        owner = owners.setdefault(group, reading.path)
        if owner != reading.path:
            reading.errors.append(
                ConfigError(
                    reading.path,
                    "channel.group",
                    f"group {group!r} is also {Path(owner).name}'s; each channel of a folder needs a group of its own",
                    "give this channel another channel.group (a subscription is a group), or remove one of the files",
                )
            )
            reading.config = None


__all__ = ["FileReading", "FolderReading", "channel_files", "load_channel_file", "read_channel_file", "read_folder"]

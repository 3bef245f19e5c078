"""``jetkafka validate DIR``: a folder of channel files checked as ``jetkafka run DIR`` reads it.

Each file is read with ``process.yaml``'s sections (:mod:`._folder`) and refused for what
``run`` would refuse (its own errors, a process section that disagrees, a group another file
has), then its ``kafka:`` section and processor are checked as ``jetkafka validate FILE``
does (:func:`jetkafka._validation.validate_config`). Nothing connects.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jetkafka._validation import ValidationReport, validate_config
from jetkafka.errors import JetkafkaError
from jetkafka.subscriptions._folder import read_folder
from jetkafka.subscriptions._process_settings import PROCESS_FILE


@dataclass
class FolderReport:
    """What :func:`validate_folder` found: ``process_errors`` (of ``process.yaml``) and one
    :class:`~jetkafka._validation.ValidationReport` per channel file, in name order."""

    folder: str
    process_file: str | None
    process_errors: list[JetkafkaError] = field(default_factory=list)
    files: list[ValidationReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.process_errors and all(f.ok for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "valid": self.ok,
            "process_file": self.process_file,
            "process_errors": [str(e) for e in self.process_errors],
            "files": [f.to_dict() for f in self.files],
        }


def validate_folder(
    folder: str | os.PathLike[str], pythonpath: Sequence[str] = (), build_processor: bool = True
) -> FolderReport:
    """Check every file of ``folder`` (see the module docstring); never raises for a problem of
    a file, only for a folder that cannot be read (:class:`~jetkafka.errors.ConfigError`)."""
    reading = read_folder(folder)
    process_path = os.path.join(os.fspath(folder), PROCESS_FILE)
    report = FolderReport(
        os.fspath(folder), process_path if reading.process_digest is not None else None, list(reading.process_errors)
    )
    for file in reading.files:
        if file.config is None:
            report.files.append(ValidationReport(file.path, None, list(file.errors)))
            continue
        report.files.append(validate_config(file.config, pythonpath, build_processor))
    return report


__all__ = ["FolderReport", "validate_folder"]

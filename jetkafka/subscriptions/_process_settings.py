"""The settings a process's channels share, and the rule that keeps them one.

Four sections of a channel's configuration belong to the process, not to the channel: the
``zookeeper`` session (one per process, :class:`~jetkafka.coordination._process_session.ProcessSession`),
the ``metrics`` endpoint (one HTTP server per address), ``tracing`` (one tracer provider) and
``logging`` (one root logger). In a folder of channel files (``jetkafka run DIR``) they must
therefore be one, and are taken from:

1. the folder's ``process.yaml``, when it exists: it may hold only these four sections, each
   optional. A section it holds is the process's, and a channel file that leaves the section
   out is read as if the section were written in it; a channel file that writes it anyway must
   write the same values (a file moved in from a single-file deployment keeps working);
2. otherwise, for a section ``process.yaml`` leaves out, the values of the first valid channel
   file in name order when the process started; every other file must agree with them.

A file that disagrees is refused with one error naming the section, both files and the fix;
the channels of the files that agree run on. The process's settings change while it runs only
through ``process.yaml``: an edit there is applied to every channel (a resubscribe for
``zookeeper``, ``metrics`` and ``tracing``, in place for ``logging.level``), as a hot deploy of
each channel file would be.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from jetkafka.config import LoggingConfig, MetricsConfig, TracingConfig, ZooKeeperConfig
from jetkafka.config._fields import spec
from jetkafka.config._loader import check_as
from jetkafka.errors import ConfigError, JetkafkaError

PROCESS_FILE = "process.yaml"
PROCESS_SECTIONS = ("zookeeper", "metrics", "tracing", "logging")


@dataclass(frozen=True)
class ProcessSettings:
    """What ``process.yaml`` holds; a section it leaves out is None."""

    zookeeper: ZooKeeperConfig | None = field(
        default=None, metadata=spec("the ZooKeeper session every channel of the process shares")
    )
    metrics: MetricsConfig | None = field(default=None, metadata=spec("the process's metrics endpoint"))
    tracing: TracingConfig | None = field(default=None, metadata=spec("the process's tracer"))
    logging: LoggingConfig | None = field(default=None, metadata=spec("the process's log output"))
    source: str = field(default="<dict>", metadata=spec("file the settings came from", yaml=False))

    def given(self) -> dict[str, Any]:
        """The sections the file holds, by name."""
        return {name: getattr(self, name) for name in PROCESS_SECTIONS if getattr(self, name) is not None}


def read_process_file(path: str | os.PathLike[str]) -> tuple[ProcessSettings | None, list[JetkafkaError]]:
    """``process.yaml`` at ``path``: the settings and no errors, or None and every error.

    A section other than the four is refused with the fix: it belongs in the channel files.
    """
    settings, errors = check_as(ProcessSettings, path)
    if len(errors) == 1 and errors[0].problem.startswith("the configuration is empty"):
        return ProcessSettings(source=os.fspath(path)), []  # nothing shared yet: all comments
    return settings, [_moved_fix(e) for e in errors]


def _moved_fix(error: ConfigError) -> JetkafkaError:
    section = error.key_path.split(".", 1)[0]
    if section and section not in PROCESS_SECTIONS and error.problem == "unknown section":
        return ConfigError(
            error.source,
            error.key_path,
            f"{PROCESS_FILE} holds only the sections the process's channels share "
            f"({', '.join(PROCESS_SECTIONS)}); {section}: belongs in each channel's own file",
            f"move {section}: into each channel file that needs it",
            error.line,
        )
    return error


__all__ = ["PROCESS_FILE", "PROCESS_SECTIONS", "ProcessSettings", "read_process_file"]

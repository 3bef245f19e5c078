"""ResetOffset's nodes in ZooKeeper, shared by the command process and the instances.

Under ``/consumers/<group>/commands``::

    lock-<topic>              ephemeral   the command process running a reset of <topic>
    reset-<id>                persistent  JSON: id, topic, to, partitions, targets, status, ...
    reset-<id>/done/<p>       persistent  JSON: old, new, by, at   (written with the offset)
    reset-<id>/errors/<p>     persistent  why an instance could not apply it yet (text)

A command's ``status`` is ``active`` while it may be applied, ``done`` once every partition has
its marker, ``aborted`` after a timeout or when a later reset of the topic superseded it.
Every application of a command checks the ``reset-<id>`` node's version in its transaction, so
a status change (which changes the version) stops every application still under way.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from jetkafka.coordination._paths import GroupPaths
from jetkafka.errors import JetkafkaError

ACTIVE, DONE, ABORTED = "active", "done", "aborted"


class ResetError(JetkafkaError):
    """A reset cannot be done as asked (bad target, partition or id); nothing was changed."""


def commands_path(paths: GroupPaths) -> str:
    return f"{paths.root}/commands"


def command_path(paths: GroupPaths, command_id: str) -> str:
    return f"{commands_path(paths)}/reset-{command_id}"


def marker_path(paths: GroupPaths, command_id: str, partition: int) -> str:
    return f"{command_path(paths, command_id)}/done/{partition}"


def error_path(paths: GroupPaths, command_id: str, partition: int) -> str:
    return f"{command_path(paths, command_id)}/errors/{partition}"


def lock_path(paths: GroupPaths, topic: str) -> str:
    return f"{commands_path(paths)}/lock-{topic}"


@dataclass(frozen=True)
class ResetCommand:
    id: str
    topic: str
    to: str  # normalized: earliest, latest, offset:<n>, time:<ms>
    partitions: tuple[int, ...] | None  # as asked; None: every partition
    targets: dict[int, int]
    status: str = ACTIVE
    created: float = field(default_factory=time.time)
    finished: float | None = None
    by: str = ""
    timeout_s: float = 60.0
    notes: dict[int, str] = field(default_factory=dict)  # partition: why its target was clamped

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "id": self.id,
                "kind": "reset",
                "topic": self.topic,
                "to": self.to,
                "partitions": list(self.partitions) if self.partitions is not None else None,
                "targets": {str(p): o for p, o in sorted(self.targets.items())},
                "status": self.status,
                "created": self.created,
                "finished": self.finished,
                "by": self.by,
                "timeout_s": self.timeout_s,
                "notes": {str(p): n for p, n in sorted(self.notes.items())},
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ResetCommand:
        d = json.loads(data)
        parts = d.get("partitions")
        return cls(
            id=str(d["id"]),
            topic=str(d["topic"]),
            to=str(d["to"]),
            partitions=tuple(int(p) for p in parts) if parts is not None else None,
            targets={int(p): int(o) for p, o in d["targets"].items()},
            status=str(d.get("status", ACTIVE)),
            created=float(d.get("created", 0.0)),
            finished=d.get("finished"),
            by=str(d.get("by", "")),
            timeout_s=float(d.get("timeout_s", 60.0)),
            notes={int(p): str(n) for p, n in (d.get("notes") or {}).items()},
        )

    def with_status(self, status: str) -> ResetCommand:
        finished = time.time() if status in (DONE, ABORTED) else None
        return ResetCommand(**{**self.__dict__, "status": status, "finished": finished})


def marker_data(old: int | None, new: int, by: str) -> bytes:
    return json.dumps({"old": old, "new": new, "by": by, "at": time.time()}).encode()


class ResetIncomplete(ResetError):
    """Some partitions were not reset within the timeout; ``result`` tells which were."""

    def __init__(self, message: str, result: ResetResult) -> None:
        super().__init__(message)
        self.result = result


# -- what a command did (its markers) ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionReset:
    partition: int
    old: int | None
    new: int
    by: str


@dataclass(frozen=True)
class ResetResult:
    command_id: str
    topic: str
    to: str
    targets: dict[int, int]
    applied: dict[int, PartitionReset]
    pending: dict[int, str] = field(default_factory=dict)  # partition: why it was not done
    resumed: bool = False  # an existing command of this id was continued
    superseded: tuple[str, ...] = ()  # interrupted earlier resets aborted first
    notes: dict[int, str] = field(default_factory=dict)  # partition: why its target was clamped

    @property
    def ok(self) -> bool:
        return not self.pending and len(self.applied) == len(self.targets)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.command_id,
            "topic": self.topic,
            "to": self.to,
            "ok": self.ok,
            "resumed": self.resumed,
            "superseded": list(self.superseded),
            "partitions": [
                {
                    "partition": p,
                    "target": target,
                    "old": self.applied[p].old if p in self.applied else None,
                    "new": self.applied[p].new if p in self.applied else None,
                    "by": self.applied[p].by if p in self.applied else None,
                    "pending": self.pending.get(p),
                    "note": self.notes.get(p),
                }
                for p, target in sorted(self.targets.items())
            ],
        }

"""The offsets history: every offset change a command made, kept in ZooKeeper, bounded.

Under ``/consumers/<group>/history``, one persistent sequential node per entry::

    entry-0000000041   JSON: id, kind, topic, to, status, who, pid, at, undoes, partitions

``partitions`` maps each moved partition to ``{"old": offset before, "new": offset after,
"by": who applied it}``. The newest :data:`HISTORY_LIMIT` entries are kept; each writer deletes
older ones after adding its own.

What is recorded: every reset a command applies (``jetkafka offsets reset``, its ``--undo``,
and :func:`jetkafka.ops.reset_offsets`). Resets are the only way a command commits offsets;
instances' own commits are not history.

Why an entry never claims a change that did not happen: its partitions are read from the
reset's markers (:mod:`jetkafka.ops._protocol`), and a marker is written in the same
transaction as the offset it records. A completed reset's entry is created in the same
ZooKeeper transaction that sets the command's status to ``done`` (with a version check), so a
``done`` reset always has its entry and an entry marked ``done`` always had every partition
moved. An incomplete reset (timeout) is first set to ``aborted``, which stops every further
application (the version changes), and only then are its markers read and an entry with
status ``incomplete`` written: it lists exactly the partitions moved. If the command process
dies between the two, that entry is missing, never wrong; repeating the command with its id
finishes the reset and writes a ``done`` entry listing every partition it moved, the earlier
runs' included. A command id can therefore have several entries; ``--undo`` uses its newest.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import NoNodeError

from jetkafka.coordination._paths import GroupPaths
from jetkafka.ops._protocol import PartitionReset, ResetError

log = logging.getLogger(__name__)

HISTORY_LIMIT = 100
_PREFIX = "entry-"


def history_path(paths: GroupPaths) -> str:
    return f"{paths.root}/history"


def who_runs_this() -> str:
    """``user@host`` of this process; the uid when the user has no name (some containers)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class HistoryEntry:
    """One reset a command applied, fully or partly (``status`` ``done`` or ``incomplete``)."""

    command_id: str
    topic: str
    to: str  # the target as described to a user, e.g. "latest" or "shift by -100"
    status: str
    partitions: dict[int, PartitionReset]
    who: str = field(default_factory=who_runs_this)
    pid: int = field(default_factory=os.getpid)
    at: float = field(default_factory=time.time)
    kind: str = "reset"  # reset, or undo (then ``undoes`` names the reset)
    undoes: str | None = None
    node: str = ""  # the entry's node name, set when read

    def to_json(self) -> bytes:
        data = self.to_dict()
        del data["node"]
        return json.dumps(data).encode()

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "id": self.command_id,
            "kind": self.kind,
            "undoes": self.undoes,
            "topic": self.topic,
            "to": self.to,
            "status": self.status,
            "who": self.who,
            "pid": self.pid,
            "at": self.at,
            "partitions": {
                str(p): {"old": r.old, "new": r.new, "by": r.by} for p, r in sorted(self.partitions.items())
            },
        }

    @classmethod
    def from_json(cls, data: bytes, node: str = "") -> HistoryEntry:
        d = json.loads(data)
        return cls(
            command_id=str(d["id"]),
            topic=str(d["topic"]),
            to=str(d.get("to", "")),
            status=str(d.get("status", "")),
            partitions={
                int(p): PartitionReset(int(p), v.get("old"), int(v["new"]), str(v.get("by", "")))
                for p, v in d.get("partitions", {}).items()
            },
            who=str(d.get("who", "")),
            pid=int(d.get("pid", 0)),
            at=float(d.get("at", 0.0)),
            kind=str(d.get("kind", "reset")),
            undoes=d.get("undoes"),
            node=node,
        )


def add_entry(tx: TransactionRequest, paths: GroupPaths, entry: HistoryEntry) -> None:
    """Create ``entry`` within ``tx``; the history node must exist (:func:`ensure_history`)."""
    tx.create(f"{history_path(paths)}/{_PREFIX}", entry.to_json(), sequence=True)


def ensure_history(client: KazooClient, paths: GroupPaths) -> None:
    client.ensure_path(history_path(paths))


def write_entry(client: KazooClient, paths: GroupPaths, entry: HistoryEntry) -> None:
    """Create ``entry`` on its own (for an incomplete reset; see the module docstring)."""
    ensure_history(client, paths)
    client.create(f"{history_path(paths)}/{_PREFIX}", entry.to_json(), sequence=True)
    trim_history(client, paths)


def trim_history(client: KazooClient, paths: GroupPaths, keep: int = HISTORY_LIMIT) -> None:
    """Delete all but the newest ``keep`` entries. Sequence numbers order them; two writers
    trimming at once delete the same nodes, which is harmless."""
    try:
        names = sorted(n for n in client.get_children(history_path(paths)) if n.startswith(_PREFIX))
    except NoNodeError:
        return
    for name in names[: max(0, len(names) - keep)]:
        try:
            client.delete(f"{history_path(paths)}/{name}")
        except NoNodeError:
            pass


def read_history(client: KazooClient, paths: GroupPaths, topics: list[str] | None = None) -> list[HistoryEntry]:
    """The entries, oldest first; only those of ``topics`` when given. Unreadable ones are skipped."""
    try:
        names = sorted(n for n in client.get_children(history_path(paths)) if n.startswith(_PREFIX))
    except NoNodeError:
        return []
    out = []
    for name in names:
        try:
            entry = HistoryEntry.from_json(client.get(f"{history_path(paths)}/{name}")[0], name)
        except (NoNodeError, ValueError, KeyError, TypeError):
            log.warning("history entry %s unreadable, skipped", name)
            continue
        if topics is None or entry.topic in topics:
            out.append(entry)
    return out


def find_reset(client: KazooClient, paths: GroupPaths, command_id: str) -> HistoryEntry:
    """The newest entry of ``command_id``; :class:`ResetError` when the history has none."""
    found = [e for e in read_history(client, paths) if e.command_id == command_id]
    if not found:
        raise ResetError(
            f"no reset {command_id} in the history of group {paths.group} (it keeps the last "
            f"{HISTORY_LIMIT}); see `jetkafka offsets history`"
        )
    return found[-1]


__all__ = [
    "HISTORY_LIMIT",
    "HistoryEntry",
    "add_entry",
    "ensure_history",
    "find_reset",
    "history_path",
    "read_history",
    "trim_history",
    "who_runs_this",
    "write_entry",
]

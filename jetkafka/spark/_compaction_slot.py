"""One compaction at a time per group: the ephemeral node ``/consumers/<group>/microbatches/compaction``.

Guarantee: while :func:`compaction_slot` is held, no other compaction of the group runs; a
second one is refused at once with :class:`CompactionRefused` naming the one that runs. Why it
matters: a compaction repairs the journals it finds, so a second one would undo the first one's
journal while that one is still staging.

Failure modes: the node is ephemeral, so a compaction that dies (kill -9, a lost session) frees
the group when its ZooKeeper session ends, and its journal is repaired by the next compaction.
A compaction whose session expires while it runs loses the node too, and another may start:
before its point of no return (the journal's ``moves.json``) a compaction checks that the node
is still its session's (:meth:`CompactionSlot.check`) and stops if not, leaving its journal to
be undone by the next. After that point two compactions can only both roll the same journal
forward, which moves each file at most once.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from jetkafka.coordination._paths import GroupPaths
from jetkafka.errors import JetkafkaError

__all__ = ["CompactionRefused", "CompactionSlot", "compaction_slot", "slot_path"]


class CompactionRefused(JetkafkaError):
    """The range cannot be compacted (not closed, already compacted, not batch ids, or another
    compaction of the group runs)."""


def slot_path(group: str) -> str:
    return f"{GroupPaths(group).root}/microbatches/compaction"


class CompactionSlot:
    """The group's compaction node, created by this process's ZooKeeper session."""

    def __init__(self, zookeeper: KazooClient, group: str, session_id: int) -> None:
        self._zookeeper = zookeeper
        self._group = group
        self._session_id = session_id

    def held(self) -> bool:
        """Whether the node is still this session's (not gone with an expired session); False
        when ZooKeeper does not answer, since then nobody can say."""
        try:
            stat = self._zookeeper.exists(slot_path(self._group))
        except KazooException:
            return False
        return stat is not None and stat.owner_session_id == self._session_id

    def check(self, what: str) -> None:
        """Raise :class:`CompactionRefused` unless the slot is still held: before ``what``, a
        step another compaction must not race."""
        if not self.held():
            raise CompactionRefused(
                f"compaction of group {self._group} lost its slot before {what}: its ZooKeeper session expired "
                "(or ZooKeeper did not answer), so another compaction may be running\n  fix: run the compaction again (the next one repairs "
                "what this one left)"
            )

    def release(self) -> None:
        # Only our own node: after an expiry the node may be another compaction's.
        if self.held():
            try:
                self._zookeeper.delete(slot_path(self._group))
            except KazooException:
                pass  # gone already, or with the session


@contextlib.contextmanager
def compaction_slot(zookeeper: KazooClient, group: str, path: str, first: int, last: int) -> Iterator[CompactionSlot]:
    """Hold the group's compaction node for the ``with`` block, or raise
    :class:`CompactionRefused` if another compaction of ``group`` holds it."""
    node = slot_path(group)
    doc = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "path": path,
        "first": first,
        "last": last,
        "at": round(time.time(), 3),
    }
    try:
        zookeeper.create(node, json.dumps(doc).encode(), ephemeral=True, makepath=True)
    except NodeExistsError:
        try:
            data, _ = zookeeper.get(node)
            other = json.loads(data)
            running = (
                f"micro-batches {other['first']}..{other['last']} of {other['path']}, "
                f"by pid {other['pid']} on {other['host']}"
            )
        except (NoNodeError, ValueError, KeyError, TypeError):
            running = "one that has just finished"
        raise CompactionRefused(
            f"another compaction of group {group} is running ({running}); one runs at a time\n"
            f"  fix: wait for it to finish (a compaction that died frees the group when its ZooKeeper session "
            f"ends) and run this one again"
        ) from None
    stat = zookeeper.exists(node)
    slot = CompactionSlot(zookeeper, group, stat.owner_session_id if stat is not None else -1)
    try:
        yield slot
    finally:
        slot.release()

"""One compaction at a time per group: the ephemeral node ``/consumers/<group>/microbatches/compaction``.

Guarantee: while :func:`compaction_slot` is held, no other compaction of the group runs; a
second one is refused at once with :class:`CompactionRefused` naming the one that runs. Why it
matters: a compaction repairs the journals it finds, so a second one would undo the first one's
journal while that one is still staging.

Failure modes: the node is ephemeral, so a compaction that dies (kill -9, a lost session) frees
the group when its ZooKeeper session ends, and its journal is repaired by the next compaction.
A compaction whose session expires while it runs loses the node too, and another may start:
before each step that changes what another compaction may be working on (repairing a journal
it found, deleting its own journal after a failed row count, writing ``moves.json``, its point
of no return) a compaction checks that the node is still its session's
(:meth:`CompactionSlot.check`) and stops if not, leaving its journal to be undone by the next.
Between a check and its step there is still the window every lease has: a process frozen (or
cut off from ZooKeeper) past the session timeout right there acts on a slot it no longer holds.
The worst case then is two compactions rolling the same journal forward: each file still moves
at most once and no row is read twice, but the slower one fails (``SinkError``, the journal no
longer matching the files) and the next compaction finishes what is left.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from jetkafka.coordination._paths import GroupPaths
from jetkafka.errors import JetkafkaError

__all__ = ["CompactionRefused", "CompactionSlot", "compaction_slot", "slot_path"]

log = logging.getLogger("jetkafka.spark")


class CompactionRefused(JetkafkaError):
    """The range cannot be compacted (not closed, already compacted, not batch ids, or another
    compaction of the group runs)."""


def slot_path(group: str) -> str:
    return f"{GroupPaths(group).root}/microbatches/compaction"


class CompactionSlot:
    """The group's compaction node, created by this process's ZooKeeper session."""

    def __init__(self, zookeeper: KazooClient, group: str, session_id: int, version: int) -> None:
        self._zookeeper = zookeeper
        self._group = group
        self._session_id = session_id
        self._version = version

    def held(self) -> bool:
        """Whether the node is still this session's (not gone with an expired session); False
        when the question fails (the connection dropped while it was asked), since then nobody
        can say. Asked while the connection is down, it waits for kazoo to reconnect."""
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
                "(or the connection dropped while it was checked), so another compaction may be running\n"
                "  fix: run the compaction again (the next one repairs what this one left)"
            )

    def release(self) -> None:
        """Delete the node if it is still ours (after an expiry it may be another compaction's),
        retrying over a dropped connection; with the session gone, so is the node."""

        def delete_if_ours() -> None:
            stat = self._zookeeper.exists(slot_path(self._group))
            if stat is not None and stat.owner_session_id == self._session_id:
                self._zookeeper.delete(slot_path(self._group), version=self._version)

        try:
            self._zookeeper.retry(delete_if_ours)
        except KazooException as exc:
            log.warning(
                "compaction slot of group %s not released (%s); it goes with the ZooKeeper session", self._group, exc
            )


@contextlib.contextmanager
def compaction_slot(zookeeper: KazooClient, group: str, path: str, first: int, last: int) -> Iterator[CompactionSlot]:
    """Hold the group's compaction node for the ``with`` block, or raise
    :class:`CompactionRefused` if another compaction of ``group`` holds it, or the group has
    no micro-batch ledger (a mistyped group must not leave nodes behind)."""
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
        # The stat is the created node's: its owner is the session that created it, whatever
        # kazoo's session is by the time we read it.
        _, stat = zookeeper.create(node, json.dumps(doc).encode(), ephemeral=True, include_data=True)
    except NoNodeError:
        raise CompactionRefused(
            f"group {group} has no micro-batch ledger ({GroupPaths(group).root}/microbatches does not exist): "
            "no Spark micro-batch of that group ever ran under this ZooKeeper path\n"
            "  fix: give the pipeline's channel.group and zookeeper.connect (with its chroot)"
        ) from None
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
    slot = CompactionSlot(zookeeper, group, stat.owner_session_id, stat.version)
    try:
        yield slot
    finally:
        slot.release()

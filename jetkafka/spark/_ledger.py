"""The micro-batch ledger in ZooKeeper: batch ids and the offset ranges of batches in flight.

Layout, under the group's node::

    /consumers/<group>/microbatches/batch-id                        persistent  next batch id, ASCII decimal
    /consumers/<group>/microbatches/pending/<topic>/<partition>     persistent  JSON {batch_id, from, to, consumer}
    /consumers/<group>/microbatches/instances/<consumer-id>         ephemeral   JSON figures for ``jetkafka status``
                                                                                (jetkafka.ops._micro_batch_reports; never read here)
    /consumers/<group>/microbatches/compaction                      ephemeral   JSON, while a compaction runs (jetkafka.spark._compaction_slot)

A micro-batch's life in ZooKeeper, per partition slice ``[from, to)``:

1. *record* (before ``fn`` runs), one transaction: for every slice, check the owner node and
   rewrite the offset node with its unchanged value (the channel's fenced commit), write the
   pending node, and bump ``batch-id`` at the version read (so ids are unique and increasing
   per group, even with many instances allocating at once);
2. *done* (after ``fn`` returned), one transaction: the fenced commit of every slice's ``to``
   and the deletion of its pending node at the version written in step 1.

A pending node therefore exists exactly while its slice's output may be written but its offsets
are not committed, and its ``from`` equals the committed offset. Whoever owns the partition
next replays ``[from, to)`` under the same batch id before anything newer.

A reposition (an offset reset, the out-of-range policy) abandons the partition's pending range:
the holder deletes the node in one transaction with a fenced rewrite of the (new) committed
offset (:meth:`MicroBatchLedger.abandon`), so only the partition's current holder can abandon
it, and the recorded batch is never replayed.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import NodeExistsError, NoNodeError

from jetkafka.coordination._paths import GroupPaths
from jetkafka.events import Key

if TYPE_CHECKING:
    from jetkafka.channel._context import ChannelContext
    from jetkafka.coordination._ownership import Lease

log = logging.getLogger("jetkafka.spark")


@dataclass(frozen=True)
class PendingRange:
    """A recorded slice of a micro-batch whose offsets are not committed yet."""

    topic: str
    partition: int
    batch_id: int
    start: int  # first offset of the slice ("from")
    end: int  # offset after its last event ("to")
    version: int  # of the pending node, for the fenced delete
    consumer: str = ""

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)


class MicroBatchLedger:
    def __init__(self, client: KazooClient, paths: GroupPaths, consumer_id: str) -> None:
        self._client = client
        self._consumer_id = consumer_id
        self.root = f"{paths.root}/microbatches"
        self.counter_path = f"{self.root}/batch-id"

    def pending_path(self, topic: str, partition: int) -> str:
        return f"{self.root}/pending/{topic}/{partition}"

    def prepare(self, topics: tuple[str, ...] | list[str]) -> None:
        """Create the parent nodes, so the transactions only ever create leaves."""
        for topic in topics:
            self._client.ensure_path(f"{self.root}/pending/{topic}")
        try:
            self._client.create(self.counter_path, b"1")
        except NodeExistsError:
            pass

    # -- reads -------------------------------------------------------------------------------

    def read_pending(self, topic: str, partition: int) -> PendingRange | None:
        try:
            data, stat = self._client.get(self.pending_path(topic, partition))
        except NoNodeError:
            return None
        return decode_pending(topic, partition, data, stat.version)

    def read_counter(self) -> tuple[int, int]:
        """The next batch id and the counter node's version."""
        data, stat = self._client.get(self.counter_path)
        text = data.decode("ascii", "replace").strip()
        return (int(text) if text.isdigit() else 1), stat.version

    def all_pending(self) -> list[PendingRange]:
        """Every pending node of the group, whoever recorded it (sorted by topic, partition)."""
        out: list[PendingRange] = []
        try:
            topics = self._client.get_children(f"{self.root}/pending")
        except NoNodeError:
            return out
        for topic in sorted(topics):
            try:
                partitions = self._client.get_children(f"{self.root}/pending/{topic}")
            except NoNodeError:
                continue
            for name in sorted(partitions, key=lambda n: (len(n), n)):
                found = self.read_pending(topic, int(name)) if name.isdigit() else None
                if found is not None:
                    out.append(found)
        return out

    def finished_below(self) -> tuple[int, list[PendingRange]]:
        """The smallest batch id that may still run, and the pending ranges.

        Every batch id below it is *finished*: it was allocated (ids come from the counter, which
        only grows) and no pending node names it, and only a recorded pending node is ever
        replayed, so no run of it can start again. It is the counter when nothing is pending,
        else the smallest pending batch id (an unreadable node counts as batch -1: nothing is
        finished until it is overwritten or removed)."""
        try:
            counter, _ = self.read_counter()
        except NoNodeError:
            counter = 1  # no micro-batch ever recorded in this group
        pending = self.all_pending()
        return min([counter, *(p.batch_id for p in pending)]), pending

    def pending_versions(self, keys: list[Key]) -> dict[Key, PendingRange | None]:
        """Current pending nodes of ``keys`` (None where absent), read in parallel."""
        asyncs = {key: self._client.get_async(self.pending_path(*key)) for key in keys}
        out: dict[Key, PendingRange | None] = {}
        for key, result in asyncs.items():
            try:
                data, stat = result.get()
            except NoNodeError:
                out[key] = None
                continue
            out[key] = decode_pending(key[0], key[1], data, stat.version)
        return out

    # -- transaction parts -------------------------------------------------------------------

    def add_record(
        self,
        tx: TransactionRequest,
        batch_id: int,
        counter_version: int,
        ranges: dict[Key, tuple[int, int]],
        existing: dict[Key, int | None],
    ) -> dict[Key, int]:
        """Operations recording ``ranges`` under ``batch_id``; returns each pending node's new version.

        ``existing`` holds the version of a stale pending node to overwrite, or None to create one.
        """
        tx.set_data(self.counter_path, str(batch_id + 1).encode(), version=counter_version)
        versions: dict[Key, int] = {}
        for key, (start, end) in sorted(ranges.items()):
            data = encode_pending(batch_id, start, end, self._consumer_id)
            old = existing.get(key)
            if old is None:
                tx.create(self.pending_path(*key), data)
                versions[key] = 0
            else:
                tx.set_data(self.pending_path(*key), data, version=old)
                versions[key] = old + 1
        return versions

    def add_done(self, tx: TransactionRequest, versions: dict[Key, int]) -> None:
        """Operations deleting the pending nodes at the versions this instance wrote or read."""
        for key, version in sorted(versions.items()):
            tx.delete(self.pending_path(*key), version=version)

    def abandon(self, context: ChannelContext, hold: Lease, pending: PendingRange) -> None:
        """Delete ``pending`` (read at its version) under ``hold``, fenced: one transaction with
        the rewrite of the unchanged committed offset, conditional on it. Raises
        :class:`~jetkafka.errors.CommitFenced` if the hold is gone, and kazoo's
        ``BadVersionError`` / ``NoNodeError`` if the node changed since it was read."""
        key = pending.key
        committed = hold.committed
        assert committed is not None
        path = self.pending_path(*key)
        context.commit(
            {key: committed},
            extra=lambda tx: tx.delete(path, version=pending.version),
            holds={key: hold},
            expected={key: committed},
        )


def encode_pending(batch_id: int, start: int, end: int, consumer: str) -> bytes:
    return json.dumps(
        {"batch_id": batch_id, "from": start, "to": end, "consumer": consumer, "recorded": round(time.time(), 3)},
        separators=(",", ":"),
    ).encode()


def decode_pending(topic: str, partition: int, data: bytes, version: int) -> PendingRange | None:
    try:
        doc = json.loads(data.decode())
        return PendingRange(
            topic,
            partition,
            int(doc["batch_id"]),
            int(doc["from"]),
            int(doc["to"]),
            version,
            str(doc.get("consumer", "")),
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        # Unreadable: treat as stale, so the next record overwrites it instead of replaying garbage.
        log.error("%s[%d]: pending micro-batch node is unreadable: %r", topic, partition, data[:200])
        return PendingRange(topic, partition, -1, -1, -1, version)

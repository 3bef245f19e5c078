"""ChannelContext: what a processor may use of its channel beyond the per-batch callbacks.

Handed to :meth:`BatchEventProcessor.on_start`. Processors that work across partitions (a
Spark micro-batch gathers events of every owned partition) commit through
:meth:`ChannelContext.commit`: one ZooKeeper transaction for all the partitions, fenced by
each partition's ownership, optionally carrying the processor's own records, so its records
and the offsets take effect together or not at all.

The context sees its channel as a :class:`~jetkafka.channel._running.RunningChannel`. Every
method may be called from any thread; ``commit`` blocks for one ZooKeeper round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from kazoo.client import KazooClient, TransactionRequest

from jetkafka.coordination._ownership import Lease
from jetkafka.coordination._paths import GroupPaths
from jetkafka.errors import CommitFenced
from jetkafka.events import Key
from jetkafka.ordering._errors import OwnCommitRefused

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel
    from jetkafka.config import JetkafkaConfig


class ChannelContext:
    def __init__(self, channel: RunningChannel, zookeeper: KazooClient, paths: GroupPaths) -> None:
        self._channel = channel
        self.zookeeper = zookeeper
        self.paths = paths

    @property
    def config(self) -> JetkafkaConfig:
        return self._channel.config

    @property
    def group(self) -> str:
        return self._channel.config.channel.group

    @property
    def consumer_id(self) -> str:
        return self._channel.consumer_id

    def owned_partitions(self) -> list[Key]:
        return self._channel.owned_partitions()

    def committed(self, topic: str, partition: int) -> int | None:
        """The last committed offset of an owned partition (None if not owned or none yet)."""
        lease = self._channel.lease(topic, partition)
        return None if lease is None else lease.committed

    def hold(self, topic: str, partition: int) -> Lease | None:
        """This instance's current hold on a partition (None if not owned, or lost).

        A partition that is lost and taken again gets a new hold, even by the same instance.
        Work gathered under one hold is committed with ``commit(..., holds=...)``, so it can
        never be committed under a later hold of the same partition. ``hold.committed`` is the
        offset committed under it.
        """
        return self._channel.lease(topic, partition)

    def commit(
        self,
        offsets: Mapping[Key, int],
        extra: Callable[[TransactionRequest], None] | None = None,
        holds: Mapping[Key, Lease] | None = None,
        expected: Mapping[Key, int | None] | None = None,
    ) -> None:
        """Commit ``offsets`` (next offset to read, per partition) atomically and fenced.

        Raises :class:`CommitFenced` naming a partition this instance no longer owns; then
        nothing was written. ``extra`` adds operations to the same transaction. With ``holds``
        (from :meth:`hold`), each listed partition commits under that hold, and is fenced if
        the partition was taken again since. With ``expected``, each listed partition commits
        only if its committed offset is still the one given (work gathered from a position
        must not land over a reset that moved it): :class:`OffsetMoved` otherwise, with
        nothing written and the partition still owned.

        The commit supersedes the partitions' ``advance()`` responses made before it that have
        not landed yet: it waits for the commit in flight, and the advance waiting for
        ``commit_interval_ms`` or for ZooKeeper to answer is dropped, so no older offset lands
        after it (see :meth:`PartitionCommitter.superseded`).

        Under ``channel.ordering: key | none`` it raises :class:`OwnCommitRefused`, writing
        nothing: the channel commits those partitions' commit points itself.
        """
        ordering = self._channel.config.channel.ordering
        if ordering != "partition" and offsets:
            raise OwnCommitRefused(ordering)
        commits = {}
        for (topic, partition), offset in offsets.items():
            lease = self._channel.lease(topic, partition)
            refusal = None
            if holds is not None and (topic, partition) in holds and holds[(topic, partition)] is not lease:
                refusal = "commit refused: the partition was lost or taken again"
            elif lease is None:
                refusal = "commit refused: partition not owned by this instance"
            if refusal is not None:
                self._channel.stats.commit_refused((topic, partition), "not_held")
                raise CommitFenced(topic, partition, refusal, "not_held")
            assert lease is not None
            commits[(topic, partition)] = (lease, offset)
        self._channel.commit_many(commits, extra, expected)

    def lease_valid(self) -> bool:
        """Whether this instance's ZooKeeper session is surely alive by its own clock.

        False once ``zookeeper.session_timeout_s`` less ``zookeeper.lease_margin_s`` has passed
        since the last answer from ZooKeeper (a process frozen or cut off), even before kazoo
        reports the session lost: another instance may own the partitions by then. Work with
        side effects (a write to a sink) should not start while it is False.
        """
        return self._channel.lease_valid()

    def may_act(self) -> bool:
        """Whether the channel's workers may start work now: ZooKeeper connected and the local
        lease running. A call to ZooKeeper made while this is False would wait for the
        connection to come back; leave such writes to the channel (``advance()``)."""
        return self._channel.may_act()

    def fencing_token(self, topic: str, partition: int) -> int | None:
        """The fencing token of this instance's current hold on a partition (None if not held).

        Every take-over of a partition gives its new owner a greater token than any earlier
        owner had. A sink that keeps the greatest token it has seen per partition, and refuses
        a write carrying a smaller one, refuses every write of an instance that lost the
        partition, however late that write arrives.
        """
        lease = self._channel.lease(topic, partition)
        return None if lease is None else lease.epoch

    def pause(self, topic: str | None = None, partition: int | None = None) -> None:
        self._channel.pause(topic, partition)

    def resume(self, topic: str | None = None, partition: int | None = None) -> None:
        self._channel.resume(topic, partition)

    def waiting_downstream(self) -> AbstractContextManager[None]:
        """Enter around a wait, in a batch callback, for a sink every partition shares (a
        writer's queue, a driver running the previous micro-batch); any worker thread may.

        Meanwhile, and for each partition then beyond its share of the buffers until it is back
        within it, the channel pauses no partition in librdkafka for holding far more than its
        share: every partition waits for the same sink, so such a pause would let no other
        partition's events through sooner, and it throws away what librdkafka fetched ahead
        for the partition (with a broker that answers a fetch with the rest of
        the partition, all of it, fetched again on resume). The fetcher still stops polling
        while the buffers are full, so memory stays bounded. A wait on something only one
        partition needs should not be wrapped: that partition is then the slow one, and its
        pause lets the others' events through.
        """
        return self._channel.waiting_downstream()

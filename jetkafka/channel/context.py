"""ChannelContext: what a processor may use of its channel beyond the per-batch callbacks.

Handed to :meth:`BatchEventProcessor.on_start`. Processors that work across partitions (a
Spark micro-batch gathers events of every owned partition) commit through
:meth:`ChannelContext.commit`: one ZooKeeper transaction for all the partitions, fenced by
each partition's ownership, optionally carrying the processor's own records, so its records
and the offsets take effect together or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kazoo.client import KazooClient, TransactionRequest

from jetkafka.coordination.paths import GroupPaths
from jetkafka.errors import CommitFenced

if TYPE_CHECKING:
    from jetkafka.channel.inbound import InboundChannel
    from jetkafka.config import JetkafkaConfig

Key = tuple[str, int]


class ChannelContext:
    def __init__(self, channel: InboundChannel, zookeeper: KazooClient, paths: GroupPaths) -> None:
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
        lease = self._channel._lease(topic, partition)
        return None if lease is None else lease.committed

    def commit(
        self, offsets: Mapping[Key, int], extra: Callable[[TransactionRequest], None] | None = None
    ) -> None:
        """Commit ``offsets`` (next offset to read, per partition) atomically and fenced.

        Raises :class:`CommitFenced` naming a partition this instance no longer owns; then
        nothing was written. ``extra`` adds operations to the same transaction.
        """
        commits = {}
        for (topic, partition), offset in offsets.items():
            lease = self._channel._lease(topic, partition)
            if lease is None:
                raise CommitFenced(topic, partition, "commit refused: partition not owned by this instance")
            commits[(topic, partition)] = (lease, offset)
        self._channel._commit_many(commits, extra)

    def pause(self, topic: str | None = None, partition: int | None = None) -> None:
        self._channel.pause(topic, partition)

    def resume(self, topic: str | None = None, partition: int | None = None) -> None:
        self._channel.resume(topic, partition)

"""RunningChannel: what the add-ons of a channel and a processor's context may use of it.

The reset responder, recovery and the metrics (:mod:`jetkafka.channel._add_ons`), and
:class:`~jetkafka.channel._context.ChannelContext`, see a started channel through this
Protocol and nothing else; :class:`~jetkafka.channel._inbound.InboundChannel` implements it.
It lists only what they use, so the channel's internals (its fetcher, membership, controller,
partition states) stay its own and can change without touching them.

Threads: every member may be called from any thread. What needs a started channel
(``zookeeper``, ``paths``, ``offsets``, ``watermarks``, ``commit_many``, ``file_move``) raises
:class:`~jetkafka.errors.JetkafkaError` on a channel that is not started; an add-on only calls
it between its ``start`` and ``stop``. Calls that write to ZooKeeper (``commit_many``,
``pause``/``resume``, waiting on a ``file_move``) block for a round trip, so a ZooKeeper watch
callback (kazoo's thread) must hand them to a thread of its own; ``file_move`` itself only
files the move and returns. A partition's events are processed by one worker thread at a
time whatever is called here: a move filed with ``file_move`` is carried out in the
partition's own turn, and ``commit_many`` is fenced by each partition's lease.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kazoo.client import KazooClient, TransactionRequest

    from jetkafka.channel._moves import Move
    from jetkafka.channel._partition import PartitionSnapshot
    from jetkafka.channel._stats import ChannelStats
    from jetkafka.config import JetkafkaConfig
    from jetkafka.coordination._offsets import OffsetStore
    from jetkafka.coordination._ownership import Lease
    from jetkafka.coordination._paths import GroupPaths
    from jetkafka.events import Key
    from jetkafka.kafka_groups._mirror import MirrorSnapshot


class RunningChannel(Protocol):
    """A channel as its add-ons and its processor's context see it (see the module docstring)."""

    @property
    def config(self) -> JetkafkaConfig:
        """The configuration the channel runs on now (a hot deploy may replace it; add-ons
        are stopped and started again around such a change)."""

    @property
    def processor(self) -> object:
        """The processor the channel runs (a hot deploy may replace it). Typed ``object``: the
        processor API depends on this module, not the other way round; add-ons look for the
        capabilities they use (``isinstance`` with a runtime-checkable Protocol)."""

    @property
    def consumer_id(self) -> str:
        """This channel's id in its group, kept for the channel object's life."""

    @property
    def stats(self) -> ChannelStats:
        """The channel's counters; add-ons record what they do to partitions there."""

    @property
    def pythonpath(self) -> tuple[str, ...]:
        """Directories processors named in the configuration are loaded from."""

    @property
    def paused(self) -> bool:
        """Whether the whole channel is paused."""

    @property
    def zookeeper(self) -> KazooClient:
        """The ZooKeeper client of the channel's session (started channel only)."""

    @property
    def paths(self) -> GroupPaths:
        """The ZooKeeper layout of the channel's group (started channel only)."""

    @property
    def offsets(self) -> OffsetStore:
        """The group's fenced offset store (started channel only)."""

    def zookeeper_state(self) -> str:
        """``CONNECTED``, ``SUSPENDED`` or ``LOST`` (also when the channel is not started)."""

    def owned_partitions(self) -> list[Key]:
        """The partitions held now, sorted."""

    def partitions(self) -> list[PartitionSnapshot]:
        """Each held partition now, sorted: position, last commit, buffer, pause."""

    def lease(self, topic: str, partition: int) -> Lease | None:
        """The current hold on a partition; None if not held or lost. A partition lost and
        taken again has a new lease, so comparing leases tells one hold from the next."""

    def is_paused(self, key: Key) -> bool:
        """Whether a partition is paused (by itself, its topic, or the whole channel)."""

    def may_act(self) -> bool:
        """Whether work may start now: ZooKeeper connected and the local lease running."""

    def lease_valid(self) -> bool:
        """Whether the ZooKeeper session is surely alive by this process's own clock."""

    def watermarks(self, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
        """The partition's low and high watermarks; raises ConnectError when Kafka does not answer."""

    def fetching(self) -> str | None:
        """None while the channel's consumer fetches; else why not."""

    def partition_counts(self, timeout: float = 10.0) -> dict[str, int]:
        """Partitions per subscribed topic in Kafka's metadata; raises ConnectError when Kafka
        does not answer."""

    def record_commit(self, key: Key, offset: int) -> None:
        """Count a commit an add-on made itself (under the partition's lease) and mirror it to
        Kafka when ``channel.commit_to_kafka`` is set, as the channel does for its own."""

    def kafka_mirror(self) -> MirrorSnapshot | None:
        """The figures of the offset mirror to Kafka's group offsets (``channel.commit_to_kafka``):
        how far Kafka's copy trails, requests sent, failures; None when the mirror is off."""

    def commit_many(
        self,
        commits: dict[Key, tuple[Lease, int]],
        extra: Callable[[TransactionRequest], None] | None,
        expected: Mapping[Key, int | None] | None = None,
    ) -> None:
        """Commit offsets of several partitions in one transaction, each fenced by its lease;
        raises CommitFenced (and reports the refused partition lost) or OffsetMoved."""

    def file_move(
        self,
        topic: str,
        partition: int,
        offset: int,
        extra: Callable[[TransactionRequest], None] | None = None,
        reason: str = "reset",
    ) -> Move:
        """File a move of a held partition to ``offset``, carried out in its next turn after
        the batch in hand; raises CommitFenced when the partition is not held."""

    def pause(self, topic: str | None = None, partition: int | None = None) -> None:
        """Stop fetching and processing (everything, a topic, or one partition)."""

    def resume(self, topic: str | None = None, partition: int | None = None) -> None:
        """Undo :meth:`pause`."""

    def waiting_downstream(self) -> AbstractContextManager[None]:
        """Around a worker's wait for a sink every partition shares: see
        :meth:`~jetkafka.channel._context.ChannelContext.waiting_downstream`."""


__all__ = ["RunningChannel"]

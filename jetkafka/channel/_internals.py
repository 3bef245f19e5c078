"""What the channel's own parts use of the channel they belong to.

:class:`~jetkafka.channel._leases.PartitionLeases`, :class:`~jetkafka.channel._controls.ChannelControls`
and :class:`~jetkafka.channel._hot_deploy.HotDeploy` act on the objects one start of the channel
builds (fetcher, work queue, membership, committer, runner) and on its configuration.
They see the channel through :class:`ChannelInternals`, not through ``InboundChannel`` itself,
so that the facade may import them without an import cycle. This is the channel package's own
interface; add-ons and processors use :class:`~jetkafka.channel._running.RunningChannel`.

Every attribute that holds a part of a start is None while the channel is stopped, and is
replaced by the next start (a hot deploy's resubscribe): read it once into a local and check it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from jetkafka.channel._add_ons import AddOns
    from jetkafka.channel._budget import BufferBudget
    from jetkafka.channel._committer import PartitionCommitter
    from jetkafka.channel._dead_letter import DeadLetterSink
    from jetkafka.channel._fetcher import Fetcher
    from jetkafka.channel._stats import ChannelStats
    from jetkafka.channel._work_queue import PartitionQueue
    from jetkafka.channel._worker import BatchRunner
    from jetkafka.config import JetkafkaConfig
    from jetkafka.coordination._membership import GroupMembership
    from jetkafka.coordination._process_session import ProcessSession
    from jetkafka.events import Key
    from jetkafka.kafka_groups._mirror import OffsetMirror
    from jetkafka.processors._base import BatchEventProcessor


class ChannelInternals(Protocol):
    # Swapped together by a hot deploy, under its reconfiguring lock only.
    config: JetkafkaConfig
    processor: BatchEventProcessor
    stats: ChannelStats
    _pythonpath: tuple[str, ...]
    _add_ons: AddOns

    # The parts of the current start (None while stopped).
    _controller: ProcessSession | None
    _fetcher: Fetcher | None
    _queue: PartitionQueue | None
    _membership: GroupMembership | None
    _committer: PartitionCommitter | None
    _runner: BatchRunner | None
    _budget: BufferBudget
    # commit_to_kafka's bookkeeping: kept across starts (None while the mirror is off).
    _mirror: OffsetMirror | None

    @property
    def running(self) -> bool: ...

    def start(self) -> None: ...

    def _leave(self, timeout: float | None, hold_over: bool = False) -> bool: ...

    def _committed(self, key: Key, offset: int) -> None: ...

    def _dead_letter_sink(self) -> DeadLetterSink | None: ...

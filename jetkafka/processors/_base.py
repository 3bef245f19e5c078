"""The processor API: what a channel calls, and what a processor answers.

A channel calls the processor of a partition from one worker thread at a time, with the
partition's events in offset order. A processor instance is shared by all partitions of the
channel, so state kept on ``self`` must be keyed by ``(source.topic, source.partition)`` or be
thread-safe.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jetkafka.channel._context import ChannelContext
    from jetkafka.events import EventBatch, PartitionSource


class ResponseKind(enum.Enum):
    ADVANCE = "advance"
    REVERT = "revert"
    GET_NEXT = "get_next"


class BatchResponse:
    """What to do after a batch (or an idle, termination or exception callback).

    - ``advance()``: commit the offset after this batch, fetch on.
    - ``revert()``: drop what was read since the last commit and re-read from it.
    - ``get_next()``: no commit, fetch on.

    ``.seek(offset)`` sets the next offset to read (with ``advance()`` that offset is what is
    committed); ``.wait(ms)`` keeps the partition away from the workers for ``ms`` milliseconds.
    """

    __slots__ = ("because", "kind", "offset", "wait_ms")

    def __init__(self, kind: ResponseKind, offset: int | None = None, wait_ms: int = 0) -> None:
        self.kind = kind
        self.offset = offset
        self.wait_ms = wait_ms
        self.because: str | None = None

    @classmethod
    def advance(cls) -> BatchResponse:
        return cls(ResponseKind.ADVANCE)

    @classmethod
    def revert(cls) -> BatchResponse:
        return cls(ResponseKind.REVERT)

    @classmethod
    def get_next(cls) -> BatchResponse:
        return cls(ResponseKind.GET_NEXT)

    def seek(self, offset: int) -> BatchResponse:
        if offset < 0:
            raise ValueError(f"seek offset must be >= 0, got {offset}")
        self.offset = offset
        return self

    def wait(self, ms: int, because: str | None = None) -> BatchResponse:
        """Come back to the partition after ``ms``. ``because`` says the partition cannot move
        on (a downstream system that is down, answering errors): until a later batch moves past
        the offset it comes back to, the partition is shown as not moving on (``retrying``,
        with ``because`` as its error) where a failing batch is shown: ``jetkafka status``,
        ``/status.json``, ``/readyz``'s ``failing``, ``jetkafka_partition_failing_seconds``."""
        if ms < 0:
            raise ValueError(f"wait must be >= 0 ms, got {ms}")
        self.wait_ms = ms
        self.because = because
        return self

    def __repr__(self) -> str:
        extra = ""
        if self.offset is not None:
            extra += f".seek({self.offset})"
        if self.wait_ms:
            extra += f".wait({self.wait_ms}, because={self.because!r})" if self.because else f".wait({self.wait_ms})"
        return f"BatchResponse.{self.kind.value}(){extra}"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, BatchResponse)
            and (self.kind, self.offset, self.wait_ms) == (other.kind, other.offset, other.wait_ms)
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.offset, self.wait_ms))


class BatchEventProcessor(ABC):
    """Base class of every processor.

    Only :meth:`on_next_batch` is required. An exception from :meth:`on_next_batch` is handed to
    :meth:`on_exception`; one from any other callback is logged, counted and treated as if the
    callback returned None. Nothing a processor raises skips events.
    """

    def on_start(self, context: ChannelContext) -> None:
        """Called when the channel starts, before any partition is taken (again after each
        resubscribe of a hot deploy). Raising here makes :meth:`InboundChannel.start` fail."""

    def on_stop(self) -> None:
        """Called when the channel has stopped (and at each resubscribe of a hot deploy).

        After a shutdown that timed out, a batch still in hand may be running.
        """

    @abstractmethod
    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        """Process a batch of events of one partition, in offset order."""

    def on_batch_processed(self, source: PartitionSource) -> None:
        """Called after the response to a batch was applied (after its commit, for advance)."""

    def on_idle(self, source: PartitionSource) -> BatchResponse | None:
        """Called once when the partition had no events for ``channel.idle_ms``."""
        return None

    def on_reposition(self, source: PartitionSource, old_offset: int, reason: str) -> None:
        """Called when the partition was moved to a new position by something other than this
        processor's own response: an offset reset (``jetkafka offsets reset``), the
        ``channel.on_out_of_range`` policy, or a halt lifted by a reset.

        ``source.head_offset`` is the new position, already committed; ``old_offset`` the
        position before; ``reason`` says which of the above (``reset``, ``out_of_range``).
        Batches from the old position that were handed over but not committed must be
        dropped: the channel delivers from the new position next. Runs on the worker thread
        that holds the partition, like every other callback of the partition.
        """

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        """Called when the partition is released (rebalance, shutdown, config change).

        Return ``BatchResponse.advance()`` to commit what was processed but not yet committed;
        ``None`` commits nothing, and the next owner re-reads from the last commit.
        """
        return None

    def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
        """Called when a callback raised, or the partition was lost (:class:`PartitionLost`).

        ``None`` (the default) re-delivers the same batch after a back-off. A processor may
        return ``advance()`` to skip the batch, or ``revert()`` to re-read from the last commit.
        """
        return None

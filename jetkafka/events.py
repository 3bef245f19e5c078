"""What a processor receives: events, and the partition they come from.

``Event`` wraps one librdkafka message without copying it; its attributes are read on demand,
so a processor that looks only at values pays only for values.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast, overload

if TYPE_CHECKING:
    from confluent_kafka import Message

# A partition as jetkafka names it everywhere: (topic, partition number).
Key = tuple[str, int]


def offset_of(message: Message) -> int:
    """The offset of a fetched record. confluent_kafka types it as optional (a message may
    carry a consumer error instead); records the fetcher hands on always have one."""
    return cast(int, message.offset())


class Event:
    """One Kafka record: ``topic``, ``partition``, ``offset``, ``key``, ``value``, ``timestamp``
    (milliseconds since the epoch, or None), ``headers`` (list of ``(name, bytes)``, possibly
    empty; the bytes are None for a header sent without a value).

    confluent_kafka types ``topic()``, ``partition()`` and ``offset()`` as optional because a
    ``Message`` may carry a consumer error instead of a record; a message that reaches an
    ``Event`` is a record (the fetcher keeps error messages away), so they are never None here.
    """

    __slots__ = ("_message", "recovery")

    def __init__(self, message: Message, recovery: bool = False) -> None:
        self._message = message
        self.recovery = recovery

    @property
    def topic(self) -> str:
        return cast(str, self._message.topic())

    @property
    def partition(self) -> int:
        return cast(int, self._message.partition())

    @property
    def offset(self) -> int:
        return cast(int, self._message.offset())

    @property
    def key(self) -> bytes | None:
        return self._message.key()

    @property
    def value(self) -> bytes | None:
        return self._message.value()

    @property
    def timestamp(self) -> int | None:
        kind, ts = self._message.timestamp()
        return None if kind == 0 else ts  # 0 is TIMESTAMP_NOT_AVAILABLE

    @property
    def headers(self) -> list[tuple[str, bytes | None]]:
        # A consumed record's headers are always a list of pairs (the dict form is only one of
        # the shapes a producer may pass); the value is None for a header without one.
        return cast("list[tuple[str, bytes | None]]", self._message.headers() or [])

    def __repr__(self) -> str:
        return f"Event({self.topic}[{self.partition}]@{self.offset})"


class EventBatch(Sequence[Event]):
    """The events of one batch, in offset order, all from one partition.

    Behaves as a read-only list of :class:`Event`. ``messages`` gives the underlying
    confluent-kafka ``Message`` objects for code that wants them without a wrapper.
    """

    __slots__ = ("messages", "recovery")

    def __init__(self, messages: list[Message], recovery: bool = False) -> None:
        self.messages = messages
        self.recovery = recovery

    def __len__(self) -> int:
        return len(self.messages)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if isinstance(index, slice):
            return [Event(m, self.recovery) for m in self.messages[index]]
        return Event(self.messages[index], self.recovery)

    def __iter__(self) -> Iterator[Event]:
        recovery = self.recovery
        for m in self.messages:
            yield Event(m, recovery)

    @property
    def first_offset(self) -> int:
        return cast(int, self.messages[0].offset())

    @property
    def last_offset(self) -> int:
        return cast(int, self.messages[-1].offset())

    @property
    def size_bytes(self) -> int:
        return sum(len(m.value() or b"") + len(m.key() or b"") for m in self.messages)

    def __repr__(self) -> str:
        if not self.messages:
            return "EventBatch([])"
        m = self.messages[0]
        return f"EventBatch({m.topic()}[{m.partition()}] {self.first_offset}..{self.last_offset})"


class PartitionSource:
    """The partition a callback is about.

    ``head_offset`` is the offset of the first event of the batch (for ``on_idle`` and
    ``on_stream_termination``: the next offset to be read). ``committed_offset`` is the last
    committed next-offset-to-read (a pipelined ``advance()`` counts once sent), or None when
    nothing was committed yet.
    """

    __slots__ = ("topic", "partition", "head_offset", "committed_offset", "next_offset", "_commit")

    def __init__(
        self,
        topic: str,
        partition: int,
        head_offset: int,
        committed_offset: int | None,
        next_offset: int,
        commit: Any = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.head_offset = head_offset
        self.committed_offset = committed_offset
        self.next_offset = next_offset
        self._commit = commit

    def commit(self, offset: int) -> None:
        """Commit ``offset`` (the next offset to read) now, fenced by ownership.

        Raises :class:`jetkafka.errors.CommitFenced` when this instance no longer owns the
        partition. Most processors return ``BatchResponse.advance()`` instead; this is for
        processors that must commit before they act (at-most-once delivery).
        """
        if self._commit is None:
            raise RuntimeError("this PartitionSource is not attached to a running channel")
        self._commit(offset)
        self.committed_offset = offset

    def __repr__(self) -> str:
        return f"PartitionSource({self.topic}[{self.partition}] head={self.head_offset})"

"""The partition and offset a thread is working on, for log records that do not name them.

A worker sets them (:func:`working_on`) for the turn it runs on a partition and clears them
(:func:`done_working`) after; the values live in a :class:`~contextvars.ContextVar`, so each
thread sees only its own. :func:`partition_and_offset` reads them for the current thread; the
JSON log format (:mod:`jetkafka.ops._log_format`) puts them in every record as fields, so a
processor's own log calls carry them too.
"""

from __future__ import annotations

from contextvars import ContextVar

from jetkafka.events import Key

# (topic, partition, offset): the partition whose turn this thread runs, and the first offset
# of the batch in hand (or the partition's position outside a batch).
_WORKING_ON: ContextVar[tuple[str, int, int] | None] = ContextVar("jetkafka_working_on", default=None)


def working_on(key: Key, offset: int) -> None:
    """Records that the current thread works on ``key`` at ``offset``."""
    _WORKING_ON.set((key[0], key[1], offset))


def done_working() -> None:
    """Records that the current thread no longer works on a partition."""
    _WORKING_ON.set(None)


def partition_and_offset() -> tuple[str, int, int] | None:
    """``(topic, partition, offset)`` the current thread works on, or None."""
    return _WORKING_ON.get()

"""What happens to a batch the processor failed on (after ``on_exception`` returned None).

``channel.on_error.mode``:

- ``retry``: the same batch is re-delivered after an exponential back-off
  (``error_backoff_ms`` doubling up to ``error_backoff_max_ms``), for as long as it fails.
  Nothing is ever skipped.
- ``skip`` / ``dead-letter``: after ``max_attempts`` failures the batch is *isolated*: it is
  re-delivered one record at a time, so the good records around a poison record are processed
  normally. A single record that fails ``max_attempts`` times is given up on: skipped (logged
  with its offset and counted), or produced to the dead-letter topic and acknowledged there,
  and only then is its offset committed past.

Isolation state lives on the partition (``redeliver``, ``isolating``, ``error_attempts``), which
only the worker holding the partition touches; under ``channel.ordering: key | none`` it lives on
each batch in flight (:class:`~jetkafka.ordering._lanes.LaneTask`), touched only by the worker
running it, so one key's failing batch holds back only its keys (:class:`Attempted` is what the
two have in common). So does ``failure``
(:class:`~jetkafka.channel._partition.PartitionFailure`): what operators are shown of a
partition that does not move on (retrying since when, attempts, the last error, the next
attempt), set at every failure and cleared once the failed batch is through.

A new ``on_error`` applies at the next attempt (:meth:`FailurePolicy.reconfigure`, on a hot
deploy's thread): a partition waiting out an error back-off scheduled under the old policy is
offered to the workers again at once instead of at the back-off's end. The policy keeps the
partitions it put in a back-off, under its lock, and ends only a back-off it scheduled itself
(a wait or another delay set since is left as it is).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from jetkafka._backoff import backoff_ms
from jetkafka.channel._dead_letter import DeadLetterSink
from jetkafka.channel._errors import DeadLetterError
from jetkafka.channel._partition import PartitionFailure
from jetkafka.events import offset_of

if TYPE_CHECKING:
    from jetkafka.channel._stats import ChannelStats
    from jetkafka.config import ChannelConfig

log = logging.getLogger("jetkafka.channel")

# The last error as operators see it: one line, at most this many characters.
ERROR_CHARS = 200
# A dead-letter policy whose sink a hot deploy is still putting in place: try again this soon.
SINK_PENDING_S = 0.1


class Attempted(Protocol):
    """What the policy reads and writes: a partition (ordering partition) or one of its batches
    in flight (ordering key or none)."""

    topic: str
    partition: int
    redeliver: list[Any] | None
    isolating: bool
    error_attempts: int
    failure: PartitionFailure | None
    not_before: float

    @property
    def key(self) -> tuple[str, int]: ...

    @property
    def position(self) -> int: ...

    @property
    def removed(self) -> bool: ...


def describe_error(error: BaseException, limit: int = ERROR_CHARS) -> str:
    """``Type: message`` on one line, cut at ``limit`` characters (ending with an ellipsis)."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


class GiveUp:
    """The record at ``offset`` was given up on; the caller commits ``offset + 1``."""

    def __init__(self, offset: int) -> None:
        self.offset = offset


class FailurePolicy:
    """``channel.on_error`` for the partitions of one channel start. Every method but
    :meth:`reconfigure` runs on the worker holding the partition's turn (under ``ordering: key |
    none``, on the worker running the batch); ``offer`` puts a partition before the workers
    again (the work queue's), or wakes a batch waiting out its back-off."""

    def __init__(
        self,
        config: ChannelConfig,
        stats: ChannelStats,
        dead_letter: DeadLetterSink | None,
        offer: Callable[[Any], None] | None = None,
    ) -> None:
        self.config = config
        self.stats = stats
        self.dead_letter = dead_letter
        self._offer = offer
        self._lock = threading.Lock()
        # Partitions waiting out an error back-off, with its end (their ``not_before`` then).
        self._backing_off: weakref.WeakKeyDictionary[Attempted, float] = weakref.WeakKeyDictionary()

    def reconfigure(self, config: ChannelConfig) -> None:
        """A new channel configuration (hot deploy, in place). When ``on_error`` changed, every
        partition waiting out an error back-off runs its next attempt at once, under the new
        policy."""
        changed = config.on_error != self.config.on_error
        self.config = config
        if not changed:
            return
        with self._lock:
            waiting = list(self._backing_off.items())
            self._backing_off.clear()
            for state, until in waiting:
                if state.not_before == until:
                    state.not_before = 0.0
        woken = [state for state, _ in waiting if not state.removed]
        if woken:
            log.info(
                "channel.on_error is now %s: %s waiting out an error back-off, tried again at once",
                config.on_error.mode,
                ", ".join(f"{s.topic}[{s.partition}] (offset {s.position})" for s in woken[:10])
                + (f" and {len(woken) - 10} more" if len(woken) > 10 else ""),
            )
        for state in woken:
            if self._offer is not None:
                self._offer(state)

    def forget(self, state: Attempted) -> None:
        """``state`` is out of the policy's hands (a batch in flight ended): a later
        :meth:`reconfigure` does not wake it."""
        if state in self._backing_off:  # most batches never failed: no lock taken for them
            with self._lock:
                self._backing_off.pop(state, None)

    def next_batch(self, state: Attempted) -> list[Any] | None:
        """The batch to re-deliver, if any: one record while isolating."""
        if state.redeliver is None:
            return None
        with self._lock:  # its back-off, if any, is over: this is the next attempt
            self._backing_off.pop(state, None)
        return state.redeliver[:1] if state.isolating else state.redeliver

    def succeeded(self, state: Attempted, batch: list[Any], waiting: PartitionFailure | None = None) -> None:
        """The batch went through; ``waiting`` (:meth:`waiting`) is what the partition shows
        instead of nothing when the processor answered with a wait that says why, set in the
        same step so that no reader sees the failure go and come back."""
        if state.redeliver is not None:
            rest = state.redeliver[len(batch) :]
            state.redeliver = rest or None
            state.isolating = state.isolating and bool(rest)
        state.error_attempts = 0
        if state.redeliver is None:
            state.failure = waiting
        elif state.failure is not None:  # isolating: the records after this one come at once
            state.failure = dataclasses.replace(state.failure, attempts=0, next_attempt=None)

    @staticmethod
    def waiting(offset: int, wait_ms: int, because: str, previous: PartitionFailure | None) -> PartitionFailure:
        """What to show when the processor answered with a wait ``because`` it cannot move on
        from ``offset`` (:meth:`~jetkafka.processors._base.BatchResponse.wait`): retrying since
        its first such answer at that offset (``previous``, the failure shown before the
        batch)."""
        now = time.time()
        same = previous is not None and previous.offsets is not None and previous.offsets[0] == offset
        return PartitionFailure(
            state="retrying",
            since=previous.since if same and previous is not None else now,
            attempts=(previous.attempts if same and previous is not None else 0) + 1,
            error=because.splitlines()[0][:ERROR_CHARS] if because else "waiting",
            offsets=(offset, offset),
            next_attempt=now + wait_ms / 1000,
        )

    def failed(self, state: Attempted, batch: list[Any], error: BaseException) -> GiveUp | None:
        """Decide after a failure with no response from ``on_exception``.

        Returns a :class:`GiveUp` when a record was skipped or dead-lettered; otherwise the
        partition is set up for re-delivery (``redeliver``, ``not_before``).
        """
        policy = self.config.on_error
        if state.redeliver is None:
            state.redeliver = batch
        if policy.mode != "retry" and state.error_attempts >= policy.max_attempts:
            if len(batch) > 1:
                log.warning(
                    "%s[%d]: offsets %d..%d failed %d times; isolating the failing record",
                    state.topic,
                    state.partition,
                    batch[0].offset(),
                    batch[-1].offset(),
                    state.error_attempts,
                )
                state.isolating = True
                state.error_attempts = 0
                self._note(state, batch, error, None)
                return None
            if policy.mode == "dead-letter" and self.dead_letter is None:
                # A hot deploy switched to dead-letter and is opening its producer right now.
                self._note(state, batch, error, SINK_PENDING_S)
                self._back_off(state, SINK_PENDING_S)
                return None
            outcome = self._give_up(state, batch[0], error)
            if isinstance(outcome, GiveUp):
                return outcome
            error = outcome  # the dead-letter topic refused it: that is what holds it now
        wait_ms = backoff_ms(state.error_attempts, self.config.error_backoff_ms, self.config.error_backoff_max_ms)
        self._note(state, batch, error, wait_ms / 1000)
        self._back_off(state, wait_ms / 1000)
        log.warning(
            "%s[%d]: re-delivering offsets %d..%d in %d ms",
            state.topic,
            state.partition,
            batch[0].offset(),
            batch[-1].offset(),
            wait_ms,
        )
        return None

    def _back_off(self, state: Attempted, seconds: float) -> None:
        with self._lock:
            state.not_before = time.monotonic() + seconds
            self._backing_off[state] = state.not_before

    def _note(self, state: Attempted, batch: list[Any], error: BaseException, wait_s: float | None) -> None:
        """What operators are shown of the partition after this failure."""
        now = time.time()
        previous = state.failure
        state.failure = PartitionFailure(
            state="isolating" if state.isolating else "retrying",
            since=previous.since if previous is not None else now,
            attempts=state.error_attempts,
            error=describe_error(error),
            offsets=(offset_of(batch[0]), offset_of(batch[-1])),
            next_attempt=None if wait_s is None else now + wait_s,
        )

    def _give_up(self, state: Attempted, record: Any, error: BaseException) -> GiveUp | DeadLetterError:
        """Skip or dead-letter the record; the error of a dead-letter send that failed (the
        record is kept and retried like a failing batch)."""
        offset = record.offset()
        if self.config.on_error.mode == "dead-letter":
            assert self.dead_letter is not None
            try:
                self.dead_letter.send(record, error, state.error_attempts)
            except DeadLetterError as exc:
                log.error("%s[%d]: offset %d: %s; will retry", state.topic, state.partition, offset, exc)
                self.stats.error(state.key, "dead_letter_failed")
                return exc
            self.stats.error(state.key, "dead_lettered")
            log.error(
                "%s[%d]: offset %d sent to dead-letter topic %s after %d attempts: %s: %s",
                state.topic,
                state.partition,
                offset,
                self.dead_letter.topic,
                state.error_attempts,
                type(error).__name__,
                error,
            )
        else:
            self.stats.error(state.key, "skipped")
            log.error(
                "%s[%d]: offset %d skipped after %d attempts (channel.on_error.mode: skip): %s: %s",
                state.topic,
                state.partition,
                offset,
                state.error_attempts,
                type(error).__name__,
                error,
            )
        rest = state.redeliver[1:] if state.redeliver else []
        state.redeliver = rest or None
        state.isolating = bool(rest)
        state.error_attempts = 0
        if rest and state.failure is not None:  # the records after it come at once
            state.failure = dataclasses.replace(state.failure, attempts=0, next_attempt=None)
        elif not rest:
            state.failure = None
        return GiveUp(offset)

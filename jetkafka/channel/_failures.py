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
only the worker holding the partition touches.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from jetkafka._backoff import backoff_ms
from jetkafka.channel._dead_letter import DeadLetterSink
from jetkafka.channel._errors import DeadLetterError
from jetkafka.channel._partition import PartitionState

if TYPE_CHECKING:
    from jetkafka.channel._stats import ChannelStats
    from jetkafka.config import ChannelConfig

log = logging.getLogger("jetkafka.channel")


class GiveUp:
    """The record at ``offset`` was given up on; the caller commits ``offset + 1``."""

    def __init__(self, offset: int) -> None:
        self.offset = offset


class FailurePolicy:
    def __init__(self, config: ChannelConfig, stats: ChannelStats, dead_letter: DeadLetterSink | None) -> None:
        self.config = config
        self.stats = stats
        self.dead_letter = dead_letter

    def next_batch(self, state: PartitionState) -> list[Any] | None:
        """The batch to re-deliver, if any: one record while isolating."""
        if state.redeliver is None:
            return None
        return state.redeliver[:1] if state.isolating else state.redeliver

    def succeeded(self, state: PartitionState, batch: list[Any]) -> None:
        if state.redeliver is not None:
            rest = state.redeliver[len(batch) :]
            state.redeliver = rest or None
            state.isolating = state.isolating and bool(rest)
        state.error_attempts = 0

    def failed(self, state: PartitionState, batch: list[Any], error: BaseException) -> GiveUp | None:
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
                return None
            given_up = self._give_up(state, batch[0], error)
            if given_up is not None:
                return given_up
        wait_ms = backoff_ms(state.error_attempts, self.config.error_backoff_ms, self.config.error_backoff_max_ms)
        state.not_before = time.monotonic() + wait_ms / 1000
        log.warning(
            "%s[%d]: re-delivering offsets %d..%d in %d ms",
            state.topic,
            state.partition,
            batch[0].offset(),
            batch[-1].offset(),
            wait_ms,
        )
        return None

    def _give_up(self, state: PartitionState, record: Any, error: BaseException) -> GiveUp | None:
        offset = record.offset()
        if self.config.on_error.mode == "dead-letter":
            assert self.dead_letter is not None
            try:
                self.dead_letter.send(record, error, state.error_attempts)
            except DeadLetterError as exc:
                log.error("%s[%d]: offset %d: %s; will retry", state.topic, state.partition, offset, exc)
                self.stats.error(state.key, "dead_letter_failed")
                return None
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
        return GiveUp(offset)

"""Each partition's share of the channel's buffer budget, and who gives room back.

Guarantee: what one partition does never holds back another. A partition that stops draining
(a poison record under ``on_error: retry``, a partition paused alone, one halted by
``on_out_of_range: fail``) or drains slowly keeps at most its own share of the budget
(``buffer_max_events`` / ``buffer_max_bytes``) while other partitions want room; memory stays
bounded by the budget (the sum of the shares), and a partition that drains again gets its
share back.

How:

* A partition *wants room* when it could fetch (not paused, halted, failing, leaving, nor
  paused for its share), less than half its share is buffered, and the broker reported records
  beyond what it fetched (its log end), unless nothing came from there for :data:`SETTLE_S`
  while it could fetch (a transaction's commit marker, not a record, ends its log).
* A partition that cannot drain gives back what it borrowed beyond its share as soon as
  another wants room or the budget is spent.
* While some partition wants room, a buffer beyond its share stops fetching (paused in
  librdkafka, :meth:`~jetkafka.channel._buffer.PartitionBuffer.append`); once the budget is
  spent, so does a draining one
  still beyond its share :data:`SHED_AFTER_S` after it stopped (one poll may have handed a
  fast partition a run beyond its share, which it processes sooner than that): its newest
  events are dropped and fetched again, from the same offset, once half its share is left
  (:meth:`~jetkafka.channel._buffer.PartitionBuffer.shed`). Nothing is lost: a dropped event
  was never handed to the processor.
* While the budget is spent and nobody is known to want room, the fetcher stops polling (the
  read-ahead of librdkafka stays where it is) and the :class:`~jetkafka.channel._log_ends.LogEndWatch`
  asks the broker for the log ends of the partitions that have room: a record produced to a
  quiet partition while another one holds the budget is found that way within about a second.
* A wait downstream (the Spark collector waiting for its driver) excuses a draining partition:
  every partition waits for the same sink then. A partition that cannot drain is never excused.

Costs: nothing is evaluated while every buffer stays within its share; the check walks the
owned partitions at most every :data:`CHECK_S` while one is beyond it. Giving room back costs a
second fetch of the events dropped, which happens only while a partition holds more than its
share and another one has records waiting, or, for one that cannot drain, the budget is spent.

Runs on the fetcher thread (:meth:`BufferShares.check`); reads the partitions' fields without
their locks (each value at worst one step old: a decision is then taken at the next check).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from jetkafka.events import Key

if TYPE_CHECKING:
    from jetkafka.channel._log_ends import LogEndWatch
    from jetkafka.channel._partition import PartitionState

log = logging.getLogger("jetkafka.channel")

# How often the owned partitions are looked at while a buffer is beyond its share or the
# budget is spent.
CHECK_S = 0.1
# How long a draining partition held at its share may stay beyond it, once the budget is spent,
# before it gives back what it borrowed: one poll can hand a partition a run beyond its share,
# which a fast one processes within this, and a slow one does not.
SHED_AFTER_S = 0.5
# A partition whose log end stays beyond its fetch position this long, while it could fetch and
# nothing arrives, holds no record there: a transaction's commit marker ends the log, or the log
# was truncated below the end last reported. It wants no room until its log end moves.
SETTLE_S = 1.0


def stalled(state: PartitionState) -> bool:
    """The partition cannot drain now: paused, halted, failing under the failure policy, or
    leaving the channel."""
    return (
        state.paused
        or state.halted is not None
        or state.redeliver is not None
        or state.release_reason is not None
        or state.lost_reason is not None
        or state.removed
    )


def has_room(state: PartitionState) -> bool:
    """The partition could fetch now and less than half its share is buffered."""
    buffer = state.buffer
    return (
        not stalled(state)
        and not buffer.fetch_paused
        and not buffer.out_of_range
        and buffer.below_half_share()
    )


def wants_room(state: PartitionState) -> bool:
    """:func:`has_room`, and the broker reported records beyond what it fetched."""
    log_end = state.buffer.log_end
    return log_end is not None and log_end > state.buffer.fetch_next and has_room(state)


class BufferShares:
    def __init__(
        self,
        partitions: Callable[[], Iterable[PartitionState]],
        log_ends: LogEndWatch | None,
        gave_back: Callable[[Key, int], None] | None = None,
    ) -> None:
        self._partitions = partitions
        self._log_ends = log_ends
        self._gave_back = gave_back  # told of each partition's events given back (the stats)
        # Whether some partition wanted room at the last check: the fetcher hands it to each
        # append, so a buffer crossing its share meanwhile stops fetching at once.
        self.others_want_room = False
        self.events_shed = 0
        self.pauses = 0
        # Per partition with records reported beyond its fetch position: (log end, appends)
        # when first seen so, and since when; once settled, the log end holding no record.
        self._gaps: dict[PartitionState, tuple[tuple[int | None, int], float]] = {}
        self._settled: dict[PartitionState, int] = {}

    def check(self, spent: bool) -> list[PartitionState]:
        """Look at the owned partitions; return those whose fetch must pause now (held at
        their share, or having given back what they borrowed)."""
        states = list(self._partitions())
        to_pause: list[PartitionState] = []
        if spent:
            # One that cannot drain has no use for what it borrowed: the room goes back at
            # once, before anyone is known to want it (nothing is fetched while it is spent).
            for state in states:
                if state.buffer.over_share and stalled(state):
                    self._shed(state, to_pause)
        waiting = [state for state in states if self._waiting(state, spent)]  # each one: they track
        if not waiting:
            self.others_want_room = False
            if spent and not to_pause and self._log_ends is not None:
                self._log_ends.look_up([s for s in states if has_room(s)])
            self.pauses += len(to_pause)
            return to_pause
        self.others_want_room = True
        for state in states:
            buffer = state.buffer
            if not buffer.over_share:
                continue
            if stalled(state):
                # It would keep what it borrowed however long the others wait.
                self._shed(state, to_pause)
            elif buffer.excused():
                continue
            elif spent and buffer.held_for() >= SHED_AFTER_S:
                # Held at its share and still beyond it: it drains slower than the others.
                self._shed(state, to_pause)
            elif buffer.hold_at_share():
                # Held without dropping anything: what the buffer holds beyond its share it
                # processes before it fetches more.
                to_pause.append(state)
        self.pauses += len(to_pause)
        return to_pause

    def _waiting(self, state: PartitionState, spent: bool) -> bool:
        """:func:`wants_room`, unless the records reported beyond its fetch position have not
        come for :data:`SETTLE_S` while it could fetch (see :data:`SETTLE_S`)."""
        if not wants_room(state):
            self._gaps.pop(state, None)
            return False
        buffer = state.buffer
        if self._settled.get(state) == buffer.log_end:
            return False
        mark = (buffer.log_end, buffer.appends)
        now = time.monotonic()
        seen = self._gaps.get(state)
        if seen is None or seen[0] != mark:
            self._gaps[state] = (mark, now)
            self._forget_gone()
            return True
        if spent or now - seen[1] < SETTLE_S:
            return True  # with the budget spent nothing is fetched: it may still come
        del self._gaps[state]
        assert buffer.log_end is not None
        self._settled[state] = buffer.log_end
        log.debug(
            "%s[%d]: nothing came from offset %d to the log end %d for %.1f s (a commit marker); wants no room",
            state.topic,
            state.partition,
            buffer.fetch_next,
            buffer.log_end,
            SETTLE_S,
        )
        return False

    def _forget_gone(self) -> None:
        for memo in (self._gaps, self._settled):
            for state in [s for s in memo if s.removed]:
                del memo[state]

    def _shed(self, state: PartitionState, to_pause: list[PartitionState]) -> None:
        dropped = state.buffer.shed()
        if not dropped:
            return
        self.events_shed += dropped
        if self._gave_back is not None:
            self._gave_back(state.key, dropped)
        self._log_shed(state, dropped)
        to_pause.append(state)

    @staticmethod
    def _log_shed(state: PartitionState, dropped: int) -> None:
        buffer = state.buffer
        # Once per partition at INFO: a partition that keeps borrowing and giving back (a slow
        # one beside busy ones) would otherwise fill the log.
        level = logging.INFO if buffer.events_shed == dropped else logging.DEBUG
        log.log(
            level,
            "%s[%d]: gave back %d buffered events to partitions with records waiting (%s); "
            "offsets from %d are fetched again once it drains",
            state.topic,
            state.partition,
            dropped,
            "it cannot drain now" if stalled(state) else "it drains slower than they do",
            buffer.fetch_next,
        )

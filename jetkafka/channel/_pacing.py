"""Log-end pacing: a partition whose fetch reached the end of its log rests before the next fetch.

Why: librdkafka sends a broker its next fetch the moment the previous answer arrives. A broker
that holds an empty fetch until records arrive or ``fetch.wait.max.ms`` passes makes that cheap;
one that answers an empty fetch at once (the dev stack's broker does) turns every caught-up
partition into a loop of empty fetches that costs the client and the broker most of a CPU
between them, taken from the processors and from Spark.

How: with pacing on, the fetching consumer runs with ``enable.partition.eof``; librdkafka then
reports reaching a partition's end once per end offset (and once again after each pause and
resume). On that report the fetcher pauses the partition's fetch and resumes it on the next
tick of a grid of ``channel.log_end_pace_ms`` intervals shared by all partitions, at least half
an interval later (so partitions that rest together are fetched again in one request), then
seeks one resumed partition per leader broker to where it stopped: librdkafka's resume alone
does not wake a broker's thread that sleeps because every partition it fetches is paused. The
first fetch after the resume brings what was produced meanwhile, or reports the end again. An
idle partition is so asked about once an interval instead of continuously.

Guarantees and failure modes:

- Nothing is lost or delivered twice: a pause discards only what librdkafka fetched beyond the
  last message the consumer handed to the channel, and the resume fetches again from just after
  it; the partition's buffer drops a re-delivered offset (:meth:`PartitionBuffer.append`).
- A record produced while its partition rests waits at most one and a half intervals longer
  (plus a poll, up to 20 ms). The leaders are those of the latest metadata look-up (the start
  and each rebalance): a partition whose leader moved since may wait up to a second once, and
  so may one never written to (offset 0) whose leader fetches no other resting partition.
- While the channel's buffer budget is spent the fetcher does not poll; rests that end then
  are resumed once it polls again.
- Pacing never resumes a partition paused for another reason (paused by the user, halted,
  holding its share of the buffer budget, waiting for a seek, left the channel): those resume
  through their own command, which also ends the rest.
- An end reported for a partition that was re-assigned, sought or unassigned since is ignored:
  each rest belongs to one lease (:class:`PartitionState`) and ends with it.

Only the fetcher thread uses this class.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jetkafka.channel._partition import PartitionState
    from jetkafka.events import Key


# How long after a rest ends the fetcher polls in steps of POLL_S (see watch_until).
WATCH_S = 0.01
POLL_S = 0.001


class LogEndPacing:
    """Which partitions rest at their log end, and until when."""

    def __init__(self, pace_ms: int) -> None:
        self.pace_s = pace_ms / 1000
        self._resting: dict[Key, tuple[float, PartitionState]] = {}
        self.next_due = math.inf  # the earliest end of a rest (monotonic), inf with none
        self.rests = 0  # rests begun, for tests and the benchmarks
        # Until then the fetcher polls in short steps: the end report that starts the next
        # rest reaches it at once, not after a whole poll, while librdkafka fetches in a loop.
        self.watch_until = 0.0

    @property
    def enabled(self) -> bool:
        return self.pace_s > 0

    def rest(self, key: Key, state: PartitionState, now: float) -> bool:
        """The fetch of ``key`` reached its end; True if the caller must pause it now (it
        was not resting already)."""
        if not self.enabled or key in self._resting:
            return False
        # Rests end on a common grid of pace intervals, so partitions that reach their end
        # together are fetched again in one request, not one request each; each rest lasts
        # between half an interval and one and a half.
        due = math.ceil((now + self.pace_s / 2) / self.pace_s) * self.pace_s
        self._resting[key] = (due, state)
        self.next_due = min(self.next_due, due)
        self.rests += 1
        return True

    def due(self, now: float) -> list[tuple[Key, PartitionState]]:
        """The rests that ended by ``now``, removed; the caller resumes those it still may."""
        if now < self.next_due:
            return []
        ended = [(key, state) for key, (due, state) in self._resting.items() if due <= now]
        for key, _ in ended:
            del self._resting[key]
        if ended:
            self.watch_until = now + WATCH_S
        self.next_due = min((due for due, _ in self._resting.values()), default=math.inf)
        return ended

    def forget(self, key: Key) -> None:
        """The partition was re-positioned, unassigned or resumed by a command: no rest."""
        if self._resting.pop(key, None) is not None and not self._resting:
            self.next_due = math.inf

    def resting(self, key: Key) -> bool:
        return key in self._resting


def may_resume(state: PartitionState) -> bool:
    """Whether a rest that ended may resume the fetch: nothing else keeps it paused."""
    buffer = state.buffer
    return not (state.paused or state.halted or buffer.fetch_paused or buffer.seek_pending or buffer.closed)

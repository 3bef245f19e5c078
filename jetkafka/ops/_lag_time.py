"""Lag in seconds: how far behind in time a partition's processing is.

Definition: ``now - timestamp of the next record to process``, where the next record is the
oldest one fetched and waiting in the partition's buffer (a batch the processor has in hand
counts as being processed; a processor stuck on it still shows as growing lag, because the
records buffered behind it age). It reads the Kafka record timestamp, so its meaning follows
the topic's ``message.timestamp.type``:

* ``CreateTime`` (Kafka's default): the producer's clock when it created the record. The lag
  then includes the time the record spent before reaching the broker, a producer clock ahead
  of ours reads as less lag (never below 0), and records produced with old timestamps (a
  replay, a backfill) read as that old.
* ``LogAppendTime``: the broker's clock when it appended the record: the time the record has
  waited in Kafka for this group.

When the buffer is empty there is no record to read a timestamp from:

* caught up (processing position at or past the cached high watermark): 0;
* behind with nothing fetched (the partition or channel paused, the fetcher not there yet):
  ``now - since``, where ``since`` is the newest moment known to have had nothing older
  pending: the timestamp of the last buffered head seen, or the watermark look-up at which
  the partition was last seen caught up. Every record still waiting came after that, so this
  is an upper bound that keeps rising while nothing moves, as a paused partition's lag does;
* nothing known yet since this instance took the partition: no sample (the series is absent
  until the first fetch or watermark look-up).

Cost: one look at the head of the buffer (under its lock) per partition per scrape; no call to
Kafka. Which thread: :class:`LagClock` is used under its owner's lock (for
:class:`~jetkafka.ops._metrics.ChannelMetrics`: the scrape thread, the status page's request
threads and the watermark thread; the status page asks the same clock as the gauge, so both
show one value). :mod:`jetkafka.ops._committed_lag` applies this rule to the partitions a status
page does not hold, with the record at the committed offset as the next record.
"""

from __future__ import annotations

from collections.abc import Iterable

from jetkafka.events import Key


class LagClock:
    """One channel's lag in seconds per partition; remembers ``since`` per held partition."""

    def __init__(self) -> None:
        self._since: dict[Key, float] = {}

    def lag_seconds(
        self,
        key: Key,
        *,
        position: int,
        buffered: int,
        next_timestamp_ms: int | None,
        high_watermark: int | None,
        checked_at: float | None,
        now: float,
    ) -> float | None:
        """The partition's lag in seconds at ``now`` (epoch seconds); None when not known yet.

        ``high_watermark`` is the cached one, looked up at ``checked_at`` (epoch seconds).
        """
        if next_timestamp_ms is not None:
            head = next_timestamp_ms / 1000
            self._since[key] = head
            return max(0.0, now - head)
        if buffered == 0 and high_watermark is not None and checked_at is not None and position >= high_watermark:
            # Everything produced before the look-up is processed.
            self._since[key] = max(self._since.get(key, checked_at), checked_at)
            return 0.0
        since = self._since.get(key)
        return None if since is None else max(0.0, now - since)

    def keep_only(self, held: Iterable[Key]) -> None:
        """Forget partitions no longer held (taken again later, they start unknown)."""
        keep = set(held)
        for key in [k for k in self._since if k not in keep]:
            del self._since[key]


__all__ = ["LagClock"]

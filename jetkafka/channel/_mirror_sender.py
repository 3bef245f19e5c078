"""The offset mirror on the wire: the fetcher thread's OffsetCommit requests and their answers.

With ``channel.commit_to_kafka`` the fetcher owns a :class:`MirrorSender`. Each turn of its loop
sends what the :class:`~jetkafka.kafka_groups._mirror.OffsetMirror` says is due, every partition
in ONE asynchronous ``commit()`` (so a busy partition costs one request per
``commit_interval_ms``, and many partitions share it); before a partition is unassigned its
pending offset goes out first (:meth:`send_before_unassign`), and at the fetcher's stop
everything pending does (:meth:`flush_at_stop`). Only the fetcher thread calls the consumer
(see :mod:`jetkafka.channel._fetcher`), so only it sends.

Answers come to :meth:`on_commit`, librdkafka's ``on_commit`` callback of the fetching
consumer, which it calls inside ``consume()`` on the fetcher thread. A request-level error or a
partition's own error is a failure whose reason is the error's name: counted per request, logged
once per reason with the fix (:mod:`jetkafka.kafka_groups._mirror_failures`), logged again only
after that reason succeeded and came back; the first success after failures is logged at INFO.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from jetkafka.events import Key
from jetkafka.kafka_groups._mirror import OffsetMirror
from jetkafka.kafka_groups._mirror_failures import failure_level, failure_message

log = logging.getLogger("jetkafka.channel")

# At the fetcher's stop, how long to wait for the answers of the last commits before closing.
STOP_WAIT_S = 3.0


class MirrorSender:
    """Sends the mirror's commits on the fetching consumer and reads their answers (the
    fetcher thread only; build it before the consumer, whose config takes :meth:`on_commit`)."""

    def __init__(self, mirror: OffsetMirror, group_id: str) -> None:
        self.mirror = mirror
        self.group_id = group_id
        self.consumer: Any = None  # the fetching consumer (or its wrapper), set once it is built

    def send_due(self, now: float) -> float:
        """Send every offset due now, in one request; returns when the next one is due
        (monotonic; inf with nothing pending)."""
        self._send(self.mirror.due(now))
        due = self.mirror.next_due()
        return math.inf if due is None else due

    def send_before_unassign(self, keys: Iterable[Key], now: float) -> None:
        """These partitions are about to be unassigned: send their pending offsets now, whatever
        the interval (with anything else due, in one request), so their last commit leaves
        before another instance may take them; then forget them."""
        offsets = self.mirror.due(now)
        keys = list(keys)
        for key in keys:
            offset = self.mirror.flush(key, now)
            if offset is not None:
                offsets[key] = offset
        self._send(offsets)
        for key in keys:
            self.mirror.forget(key)

    def flush_at_stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """The fetcher stops: send everything pending, and serve answers until every send is
        answered or ``wait_s`` passed (an unreachable broker must not hold up the stop)."""
        self._send(self.mirror.flush_all())
        deadline = time.monotonic() + wait_s
        try:
            while self.mirror.in_flight() and time.monotonic() < deadline:
                self.consumer.consume(num_messages=100, timeout=0.05)  # messages are dropped: the fetch ends
        except KafkaException as exc:
            log.warning("commit_to_kafka: waiting for the last mirrored offsets of group %s failed: %s", self.group_id, exc)
        left = self.mirror.in_flight()
        if left:
            log.warning(
                "commit_to_kafka: mirrored offsets %s of group %s not confirmed by the broker within %.0f s of the "
                "stop; Kafka's copy may trail ZooKeeper's until these partitions commit again",
                ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(left.items())),
                self.group_id,
                wait_s,
            )
        self.mirror.forget_all()

    def _send(self, offsets: dict[Key, int]) -> None:
        if not offsets:
            return
        self.mirror.requests_sent(len(offsets))
        try:
            self.consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=True
            )
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            self._failed(offsets, err.name() if err is not None else "_FAILED", err.str() if err is not None else str(exc))

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's answer to one commit request (on the fetcher thread, inside consume())."""
        ok: dict[Key, int] = {}
        failed: dict[str, tuple[dict[Key, int], str]] = {}
        for tp in partitions:
            key = (tp.topic, tp.partition)
            error = tp.error or err
            if error is None:
                ok[key] = tp.offset
            else:
                failed.setdefault(error.name(), ({}, error.str()))[0][key] = tp.offset
        if err is not None and not partitions:
            self._failed({}, err.name(), err.str())
        for reason, (offsets, message) in failed.items():
            self._failed(offsets, reason, message)
        if ok and (failures := self.mirror.confirmed(ok)):
            shown = ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(ok.items())[:10])
            log.info(
                "commit_to_kafka: Kafka takes the mirrored offsets of group %s again (%s), after %d failed request(s)",
                self.group_id,
                shown,
                failures,
            )

    def _failed(self, offsets: dict[Key, int], reason: str, message: str) -> None:
        if self.mirror.failed(offsets, reason):
            log.log(failure_level(reason), "%s", failure_message(self.group_id, reason, message, offsets))
        else:
            log.debug("commit_to_kafka: mirrored offsets %s of group %s refused again (%s)", offsets, self.group_id, reason)


__all__ = ["STOP_WAIT_S", "MirrorSender"]

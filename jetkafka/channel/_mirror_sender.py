"""The offset mirror on the wire: the fetcher thread's OffsetCommit requests and their answers.

With ``channel.commit_to_kafka`` the fetcher owns a :class:`MirrorSender` and a consumer for it
alone (same ``group.id``, never assigned a partition), called only from the fetcher thread. Each
turn of the fetcher's loop serves the answers that arrived and sends what the
:class:`~jetkafka.kafka_groups._mirror.OffsetMirror` says is due, every partition in ONE
asynchronous ``commit()`` (so a busy partition costs one request per ``commit_interval_ms``, and
many partitions share it). Before a partition is unassigned its pending offset goes out first
(:meth:`send_before_unassign`). A stopping (or resubscribing) channel, once its partitions are
released and while its session still runs, has the fetcher thread send everything pending and
wait for the answers (:meth:`request_flush`, :meth:`flush`); the fetcher's own stop then only
serves answers still awaited (:meth:`close`). The consumer of its own is why answers are read
even while the fetch waits for room in the buffers (a paused, full channel).

Answers come to :meth:`on_commit`, librdkafka's ``on_commit`` callback, inside ``consume()``. A
request-level error or a partition's own error is a failure whose reason is the error's name:
counted per request, logged once per reason with the fix
(:mod:`jetkafka.kafka_groups._mirror_failures`), logged again only after that reason succeeded and
came back; the first success after failures is logged at INFO. A refused last copy of a released
partition is not sent again (it could land after the next owner's), and a WARNING says so.

Fenced: an instance sends a partition's offset only while its ZooKeeper session's local lease
runs (``may_send``, the bound of every partition lease it has) and while it ``holds`` the
partition (in its table, not lost). A frozen instance thawed past its session (a zombie) finds
its lease run out and its partitions lost: it sends nothing of theirs, and drops what it had not
sent once they are unassigned, so Kafka's copy, which their new owners are writing meanwhile,
never goes back to the zombie's older offsets.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from jetkafka.events import Key
from jetkafka.kafka_groups._mirror import OffsetMirror
from jetkafka.kafka_groups._mirror_failures import failure_level, failure_message

log = logging.getLogger("jetkafka.channel")

# At the fetcher's stop, how long to wait for the answers of the last commits before closing.
STOP_WAIT_S = 3.0
# While the lease does not run, how often to look at it again (pending offsets wait meanwhile).
FENCE_RECHECK_S = 0.1


class MirrorSender:
    """Sends the mirror's commits and reads their answers, on a consumer of its own that is
    never assigned anything, so its answers are served every turn of the fetcher thread even
    while the fetch itself waits for room (the fetcher thread only)."""

    def __init__(
        self,
        mirror: OffsetMirror,
        group_id: str,
        may_send: Callable[[], bool] | None = None,
        holds: Callable[[Key], bool] | None = None,
    ) -> None:
        self.mirror = mirror
        self.group_id = group_id
        self.consumer: Any = None  # the mirror's consumer (or its wrapper), set once it is built
        self._may_send = may_send or (lambda: True)
        self._holds = holds or (lambda key: True)
        self._awaiting = 0  # requests sent and not answered yet
        self._closed = False  # answers served by close() itself are not counted
        self._leases: dict[Key, object] = {}  # the state each partition was last assigned with
        self._flush_requested = threading.Event()
        self._flushed = threading.Event()

    # -- any thread ------------------------------------------------------------------------

    def request_flush(self) -> threading.Event:
        """Ask the fetcher thread for :meth:`flush` at its next turn; the event is set once done."""
        self._flushed.clear()
        self._flush_requested.set()
        return self._flushed

    # -- the fetcher thread ----------------------------------------------------------------

    @property
    def flush_requested(self) -> bool:
        return self._flush_requested.is_set()

    def serve(self) -> None:
        """Serve the answers that arrived (the consumer holds no partition: nothing is fetched)."""
        if self._awaiting:
            try:
                self.consumer.consume(num_messages=1, timeout=0)
            except KafkaException as exc:
                log.debug("commit_to_kafka: serving the answers of group %s failed: %s", self.group_id, exc)

    def adopt(self, key: Key, state: object, committed: int | None) -> None:
        """``key`` is assigned for ``state``: if that is a new lease, an offer left unsent by an
        earlier lease of it (lost, or given up before it was adopted) is replaced by the new
        lease's committed offset, ZooKeeper's at the take-over, so no older copy is sent now."""
        if self._leases.get(key) is state:
            return  # a seek of the same lease
        self._leases[key] = state
        self.mirror.adopt(key, committed)

    def send_due(self, now: float) -> float:
        """Serve answers, then send every offset due now of the partitions held, in one
        request; returns when the next one is due (monotonic; inf with nothing pending).
        Nothing is sent while the session's lease does not run."""
        self.serve()
        due = self.mirror.next_due()
        if due is not None and due <= now and not self._may_send():
            return now + FENCE_RECHECK_S
        self._send(self.mirror.due(now, self._holds))
        due = self.mirror.next_due()
        return math.inf if due is None else due

    def send_before_unassign(self, released: Iterable[Key], lost: Iterable[Key], now: float) -> None:
        """These partitions are about to be unassigned: send the pending offsets of those
        ``released`` now, whatever the interval (with anything else due, in one request), so
        their last commit leaves before another instance may take them; drop those of the
        partitions ``lost`` (another instance may own them already); then forget them all."""
        released, lost = list(released), list(lost)
        for key in lost:
            self.mirror.drop(key)
        if self._may_send():
            offsets = self.mirror.due(now, self._holds)
            for key in released:
                offset = self.mirror.flush(key, now)
                if offset is not None:
                    offsets[key] = offset
            self._send(offsets)
        else:
            for key in released:
                self.mirror.drop(key)
        for key in released:
            self.mirror.forget(key)

    def flush(self, wait_s: float = STOP_WAIT_S) -> None:
        """The channel is about to stop (or resubscribe), its partitions released and its
        session still running: send every offset pending of the partitions still held, and
        serve answers (sending failed ones again when due) until none is awaited or ``wait_s``
        passed. Called for :meth:`request_flush`, after the commands queued before it."""
        self._flush_requested.clear()
        deadline = time.monotonic() + wait_s
        if self._may_send():
            self._send(self.mirror.flush_all(self._holds))
        try:
            while time.monotonic() < deadline and (self._awaiting or self.mirror.pending(self._holds)):
                self.send_due(time.monotonic())
                self.consumer.consume(num_messages=1, timeout=0.05)
        except KafkaException as exc:
            log.warning("commit_to_kafka: sending the last mirrored offsets of group %s failed: %s", self.group_id, exc)
        finally:
            self._flushed.set()

    def close(self, holds: Callable[[Key], bool], wait_s: float = STOP_WAIT_S) -> None:
        """The fetcher stops (the session may be closed already: nothing more is sent): serve
        the answers still awaited for up to ``wait_s``, name what is left unconfirmed, and
        keep for the next start only what it still holds (a resubscribe's held-over
        partitions)."""
        deadline = time.monotonic() + wait_s
        try:
            while self._awaiting and time.monotonic() < deadline:
                self.consumer.consume(num_messages=1, timeout=0.05)
        except KafkaException as exc:
            log.warning("commit_to_kafka: waiting for the last mirrored offsets of group %s failed: %s", self.group_id, exc)
        unanswered = self.mirror.in_flight()
        unsent = {k: o for k, o in self.mirror.pending().items() if not holds(k) and k not in unanswered}
        for left, what in ((unanswered, "not answered by the broker"), (unsent, "not sent (partitions released or lost)")):
            if left:
                log.warning(
                    "commit_to_kafka: mirrored offsets %s of group %s %s at the stop; Kafka's copy may trail "
                    "ZooKeeper's until these partitions commit again",
                    ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(left.items())),
                    self.group_id,
                    what,
                )
        self.mirror.forget_all(holds)
        self._flushed.set()
        self._closed = True
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("commit_to_kafka: closing the mirror's consumer of group %s: %s", self.group_id, exc)

    def _send(self, offsets: dict[Key, int]) -> None:
        if not offsets:
            return
        self.mirror.requests_sent(len(offsets))
        try:
            self.consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=True
            )
            self._awaiting += 1
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            self._failed(offsets, err.name() if err is not None else "_FAILED", err.str() if err is not None else str(exc))

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's answer to one commit request (on the fetcher thread, inside consume())."""
        if self._closed:
            return  # served by the consumer's close, after the mirror forgot this start's sends
        self._awaiting = max(0, self._awaiting - 1)
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
        given_up: dict[Key, int] = {}
        if self.mirror.failed(offsets, reason, given_up):
            log.log(failure_level(reason), "%s", failure_message(self.group_id, reason, message, offsets))
        else:
            log.debug("commit_to_kafka: mirrored offsets %s of group %s refused again (%s)", offsets, self.group_id, reason)
        if given_up:
            log.warning(
                "commit_to_kafka: the last mirrored offsets %s of released partitions of group %s were refused (%s) "
                "and are not sent again (a retry could land after their next owner's); Kafka's copy trails until "
                "the next owner commits",
                ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(given_up.items())),
                self.group_id,
                reason,
            )


__all__ = ["FENCE_RECHECK_S", "STOP_WAIT_S", "MirrorSender"]

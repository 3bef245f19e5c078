"""The fetcher: one librdkafka consumer per channel, with manual partition assignment.

Only the fetcher thread calls the fetching consumer (librdkafka's Python binding hangs when
one consumer is called from a second thread while ``consume`` runs); other threads post
commands (assign, unassign, seek, resume, mirror commits) that it applies between polls, and
read metadata and watermarks through a second, idle consumer. Messages are routed to their
partition's bounded buffer; a buffer far beyond its share of the channel's budget pauses
fetching of that partition in librdkafka (unless a worker waits downstream, see
:mod:`jetkafka.channel._budget`), so a large backlog costs at most ``buffer_max_events`` /
``buffer_max_bytes`` per partition plus librdkafka's own pre-fetch queue
(``queued.max.messages.kbytes``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from itertools import groupby
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from jetkafka._client_logs import librdkafka_logger
from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._partition import PartitionState
from jetkafka.errors import ConnectError, TopicNotFound
from jetkafka.events import Key

log = logging.getLogger(__name__)


# A command (assign, seek, resume, ...) waits for the fetcher's current poll to end: at most
# this long while partitions are assigned. Polls that find nothing cost a few microseconds.
_POLL_S = 0.02
# With nothing assigned the fetcher waits for a command and serves librdkafka's logs and
# errors this often.
_IDLE_WAIT_S = 0.1
# Messages per consume() call. A list of 500 messages of 200 B (about 200 KB of Python objects)
# is still warm in the CPU cache when it is routed and taken; with 1,000 per call both the
# channel and a plain consume loop used more CPU per event (docs/performance.md, sixth round).
MAX_POLL = 500

_partition_of = Message.partition
_error_of = Message.error

# Properties jetkafka needs for manual assignment with offsets kept in ZooKeeper.
_FORCED = {"enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": False}


# Defaults a ``kafka:`` section may override. When librdkafka's pre-fetch queue is past
# ``queued.min.messages``, librdkafka postpones the next fetch of *every* partition by
# ``fetch.queue.backoff.ms`` (default 1,000; its documentation advises lowering it when ~1 s
# gaps between messages appear): a channel that drains its queue sooner sits idle meanwhile.
# A broker answering with more than asked for (the dev stack's does) gets there on the first
# fetch, and then the partitions that fetch left out wait.
_DEFAULTS = {"auto.offset.reset": "error", "fetch.queue.backoff.ms": 50}


def consumer_config(kafka: Mapping[str, Any], group: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"group.id": f"jetkafka.{group}", **_DEFAULTS}
    conf.update(kafka)
    conf.update(_FORCED)
    return conf


# Given each librdkafka consumer the fetcher makes and its role ("fetch": assign, consume,
# pause, seek; "metadata": watermarks and offset look-ups), returns what the fetcher calls in
# its place: the consumer itself, or an object that forwards to it (instrumentation, a source
# built in the process for a benchmark, an injected fault).
ConsumerWrapper = Callable[[Consumer, str], Any]


def _as_is(consumer: Consumer, role: str) -> Consumer:
    return consumer


class Fetcher:
    def __init__(
        self,
        kafka: Mapping[str, Any],
        group: str,
        states: Callable[[Key], PartitionState | None],
        on_data: Callable[[PartitionState], None],
        budget: BufferBudget,
        max_poll: int = MAX_POLL,
        wrap_consumer: ConsumerWrapper | None = None,
        connection_timeout_s: float = 10.0,
    ) -> None:
        self._conf = consumer_config(kafka, group)
        # How long a metadata look-up waits for a broker (channel.kafka_connection_timeout_s).
        self._connection_timeout_s = connection_timeout_s
        self._bootstrap = str(self._conf.get("bootstrap.servers", "?"))
        wrap = wrap_consumer or _as_is
        self.consumer = wrap(Consumer(self._conf, logger=librdkafka_logger()), "fetch")
        self._meta = wrap(Consumer(self._conf, logger=librdkafka_logger()), "metadata")
        self._meta_lock = threading.Lock()
        self._states = states
        self._on_data = on_data
        self._budget = budget
        self._max_poll = max_poll
        # (operation, {partition: offset}); the offset is -1 where the operation takes none.
        self._commands: queue.SimpleQueue[tuple[str, dict[Key, int]]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._assigned: set[Key] = set()  # fetcher thread only
        self._one_topic: str | None = None  # the topic of every assigned partition, if they share one
        self._thread: threading.Thread | None = None
        self.events_fetched = 0

    # -- metadata (any thread) -------------------------------------------------------------

    def partition_counts(
        self, topics: tuple[str, ...], timeout: float | None = None, missing_ok: bool = False
    ) -> dict[str, int]:
        """Partitions per topic; a missing topic raises :class:`TopicNotFound` unless ``missing_ok``.

        Waits up to ``timeout`` (default: the connection timeout) for a broker, then raises
        :class:`ConnectError` naming the address, the timeout and its setting.
        """
        timeout = self._connection_timeout_s if timeout is None else timeout
        try:
            with self._meta_lock:
                meta = self._meta.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise ConnectError(
                f"cannot reach Kafka at {self._bootstrap} within {timeout:g} s ({exc.args[0].str()}); "
                "check kafka.bootstrap.servers and that the broker runs (for a local one: jetkafka dev up), "
                "or raise channel.kafka_connection_timeout_s"
            ) from None
        counts = {}
        for topic in topics:
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None or not tmeta.partitions:
                if missing_ok:
                    continue
                raise TopicNotFound(
                    f"topic {topic!r} does not exist on {self._bootstrap}; create it, or fix channel.topics"
                )
            counts[topic] = len(tmeta.partitions)
        return counts

    def watermarks(self, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
        try:
            with self._meta_lock:
                low, high = self._meta.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        except KafkaException as exc:
            raise ConnectError(f"{topic}[{partition}]: cannot read watermarks from {self._bootstrap}: {exc}") from None
        return int(low), int(high)

    def log_ends(self, topic: str, partitions: list[int], earliest: bool, timeout: float = 10.0) -> dict[int, int]:
        """The low (``earliest``) or high watermark of each partition, in one request.

        ListOffsets with the special timestamps -2 / -1; a partition the broker answers with
        an error is asked again on its own (:meth:`watermarks`).
        """
        wanted = [TopicPartition(topic, p, -2 if earliest else -1) for p in partitions]
        try:
            with self._meta_lock:
                found = self._meta.offsets_for_times(wanted, timeout=timeout)
        except KafkaException:
            found = []
        out = {tp.partition: int(tp.offset) for tp in found if tp.error is None and tp.offset >= 0}
        for p in partitions:
            if p not in out:
                low, high = self.watermarks(topic, p, timeout)
                out[p] = low if earliest else high
        return out

    # -- commands (any thread) -------------------------------------------------------------

    def assign(self, positions: Mapping[Key, int]) -> None:
        """Start fetching each partition at its offset, all in one librdkafka call."""
        self._commands.put(("assign", dict(positions)))

    def unassign(self, key: Key) -> None:
        self._commands.put(("unassign", {key: -1}))

    def seek(self, key: Key, offset: int) -> None:
        """Restart fetching at ``offset``; the caller already called ``state.reposition``."""
        self._commands.put(("seek", {key: offset}))

    def pause(self, key: Key) -> None:
        self._commands.put(("pause", {key: -1}))

    def resume(self, key: Key) -> None:
        self._commands.put(("resume", {key: -1}))

    def mirror_commit(self, key: Key, offset: int) -> None:
        """Copy a committed offset to Kafka's group offsets, for standard lag tools."""
        self._commands.put(("commit", {key: offset}))

    # -- the fetcher thread ----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jetkafka-fetcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.consumer.close()
        with self._meta_lock:
            self._meta.close()

    def _run(self) -> None:
        consume = self.consumer.consume
        while not self._stop.is_set():
            if self._assigned:
                self._apply_commands()
                if not self._budget.wait_for_room(0.1):
                    continue
                timeout = _POLL_S
            else:
                # Nothing to fetch: wait for a command rather than in consume(), so the first
                # assignment is applied the moment it is posted.
                try:
                    self._apply_commands(self._commands.get(timeout=_IDLE_WAIT_S))
                    continue
                except queue.Empty:
                    timeout = 0  # only serve librdkafka's logs and errors
            try:
                msgs = consume(num_messages=self._max_poll, timeout=timeout)
            except KafkaException as exc:  # consumer closed or fatal
                log.error("fetch failed: %s", exc)
                self._stop.wait(1.0)
                continue
            if msgs:
                self._route(msgs)

    def _route(self, msgs: list[Any]) -> None:
        """Hand each run of consecutive messages of one partition to that partition's buffer."""
        topic = self._one_topic
        if topic is not None and msgs[0].topic() == msgs[-1].topic() == topic and not any(map(_error_of, msgs)):
            # The common case, one topic and no error: the passes over the messages run in C
            # (map, count, groupby), since this is the fetcher's work for every event.
            parts = list(map(_partition_of, msgs))
            if parts.count(parts[0]) == len(parts):
                self._flush((topic, cast(int, parts[0])), msgs)
            else:
                for partition, group in groupby(msgs, key=_partition_of):
                    self._flush((topic, cast(int, partition)), list(group))
            return
        run: list[Any] = []
        run_key: Key | None = None
        for m in msgs:
            if m.error() is not None:
                self._flush(run_key, run)
                run, run_key = [], None
                self._on_error(m)
                continue
            key = (cast(str, m.topic()), cast(int, m.partition()))
            if key != run_key:
                self._flush(run_key, run)
                run, run_key = [], key
            run.append(m)
        self._flush(run_key, run)

    def _flush(self, key: Key | None, run: list[Any]) -> None:
        if not run or key is None:
            return
        state = self._states(key)
        if state is None:
            return  # released since the fetch: drop
        self.events_fetched += len(run)
        tp = TopicPartition(key[0], key[1])
        if state.buffer.append(run, self._log_end(tp)):
            self.consumer.pause([tp])
        self._on_data(state)

    def _log_end(self, tp: TopicPartition) -> int | None:
        """The partition's high watermark from the fetching consumer's latest fetch response
        (a local read, no request), or None while it has none: with the buffer, it tells
        whether more records are known to wait (:meth:`PartitionBuffer.drained`)."""
        try:
            ends = self.consumer.get_watermark_offsets(tp, cached=True)
        except KafkaException:
            return None
        return ends[1] if ends and ends[1] >= 0 else None

    def _on_error(self, m: Any) -> None:
        err: KafkaError = m.error()
        code = err.code()
        key = (m.topic(), m.partition()) if m.topic() is not None else None
        if code in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET) and key is not None:
            state = self._states(key)
            if state is not None:
                state.buffer.mark_out_of_range()
                log.error(
                    "%s[%d]: fetch offset %d is out of range on the broker", key[0], key[1], state.buffer.fetch_next
                )
                self._on_data(state)
            return
        if err.fatal():
            log.critical("fatal Kafka error: %s", err.str())
        elif code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            log.warning("Kafka unreachable (%s); librdkafka keeps retrying", err.str())
        else:
            log.warning("Kafka error%s: %s", f" on {key[0]}[{key[1]}]" if key else "", err.str())

    def _apply_commands(self, first: tuple[str, dict[Key, int]] | None = None) -> None:
        pending: list[tuple[str, dict[Key, int]]] = [first] if first is not None else []
        while True:
            try:
                pending.append(self._commands.get_nowait())
            except queue.Empty:
                break
        i = 0
        while i < len(pending):
            # Consecutive (re)assignments reach librdkafka in one call, so its next fetch asks
            # for all of them: a partition assigned alone is fetched alone, and a large answer
            # for it fills librdkafka's queue, which then holds back the fetch of the others
            # for fetch.queue.backoff.ms. Of two positions for one partition the later wins,
            # as it would applied one after the other.
            positions: dict[Key, int] = {}
            while i < len(pending) and pending[i][0] in ("assign", "seek"):
                positions.update(pending[i][1])
                i += 1
            if positions:
                self._assign(positions)
                continue
            op, targets = pending[i]
            for key, offset in targets.items():
                self._apply(op, key, offset)
            i += 1

    def _assign(self, positions: dict[Key, int]) -> None:
        """Fetch each partition from its offset; one librdkafka call for all of them, or, if
        that fails, one call each, so one bad partition does not hold up the others."""
        try:
            # Re-assigning discards whatever librdkafka pre-fetched from the old position.
            again = [TopicPartition(t, p) for (t, p) in positions if (t, p) in self._assigned]
            if again:
                self.consumer.incremental_unassign(again)
                self._assigned.difference_update(positions)
            self.consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        except KafkaException as exc:
            if len(positions) > 1:
                log.warning("assigning %d partitions together failed (%s); assigning one by one", len(positions), exc)
                for key, offset in positions.items():
                    self._assign({key: offset})
            else:
                for (topic, partition), offset in positions.items():
                    log.error("%s[%d]: assign of offset %d failed: %s", topic, partition, offset, exc)
            return
        self._assigned.update(positions)
        self._topics_changed()
        for key, offset in positions.items():
            try:
                self._fetching_from(key, offset)
            except KafkaException as exc:
                log.error("%s[%d]: setting pause/resume at offset %d failed: %s", key[0], key[1], offset, exc)

    def _topics_changed(self) -> None:
        topics = {topic for topic, _ in self._assigned}
        self._one_topic = topics.pop() if len(topics) == 1 else None

    def _fetching_from(self, key: Key, offset: int) -> None:
        state = self._states(key)
        tp = TopicPartition(key[0], key[1])
        # librdkafka keeps a partition's pause across unassign/assign: set it anew.
        if state is not None and (state.paused or state.buffer.fetch_paused):
            self.consumer.pause([tp])
        else:
            self.consumer.resume([tp])
        if state is not None:
            state.buffer.fetching_from(offset)
        log.debug("%s[%d]: fetching from offset %d", key[0], key[1], offset)

    def _apply(self, op: str, key: Key, offset: int) -> None:
        """Unassign, pause, resume or mirror a commit (assignments go through :meth:`_assign`)."""
        part = TopicPartition(key[0], key[1])
        try:
            if op == "unassign" and key in self._assigned:
                self.consumer.incremental_unassign([part])
                self._assigned.discard(key)
                self._topics_changed()
            elif op == "pause" and key in self._assigned:
                self.consumer.pause([part])
            elif op == "resume" and key in self._assigned:
                state = self._states(key)
                # Stay paused while the user paused it or its buffer is still over budget.
                if state is None or not (state.paused or state.buffer.fetch_paused):
                    self.consumer.resume([part])
            elif op == "commit":
                self.consumer.commit(offsets=[TopicPartition(key[0], key[1], offset)], asynchronous=True)
        except KafkaException as exc:
            log.error("%s[%d]: %s of offset %d failed: %s", key[0], key[1], op, offset, exc)

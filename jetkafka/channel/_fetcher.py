"""The fetcher: one librdkafka consumer per channel, with manual partition assignment.

Only the fetcher thread calls the fetching consumer (librdkafka's Python binding hangs when
one consumer is called from a second thread while ``consume`` runs); other threads post
commands (assign, unassign, seek, pause, resume), each for one lease of a partition
(:mod:`jetkafka.channel._fetch_commands`), that it applies between polls, and read
metadata and watermarks through a second, idle consumer. Messages are routed to their
partition's bounded buffer. While the buffers together stay within the channel's budget the
fetcher polls; a partition beyond its share while others want room stops fetching, and gives
back what it borrowed once the budget is spent (:mod:`jetkafka.channel._shares`), so one
partition that does not drain never holds back another; a large backlog costs at most the
budget (``buffer_max_events`` / ``buffer_max_bytes`` per owned partition) plus librdkafka's
own read-ahead queue (``queued.max.messages.kbytes``). With ``channel.commit_to_kafka`` it
also sends the offset mirror's commits, between polls too (:mod:`jetkafka.channel._mirror_sender`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from itertools import groupby
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from jetkafka._client_logs import librdkafka_logger
from jetkafka.channel import _pacing as pacing
from jetkafka.channel._broker_metadata import BrokerMetadata
from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._fetch_commands import RETRY_S, FetchCommand, FetchCommands, Positions
from jetkafka.channel._log_ends import LogEndWatch
from jetkafka.channel._mirror_sender import STOP_WAIT_S, MirrorSender
from jetkafka.channel._pacing import LogEndPacing, may_resume
from jetkafka.channel._partition import PartitionState
from jetkafka.channel._shares import CHECK_S, BufferShares
from jetkafka.events import Key
from jetkafka.kafka_groups._mirror import OffsetMirror

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
# ``queued.min.messages``: librdkafka fetches ahead until its queue holds this many messages
# (its default, 100,000). The channel's buffers already hold what the workers need next; a
# smaller read-ahead shortens librdkafka's fetch loop and its memory (the example Spark
# pipeline: 2 s less CPU per 1,000,000 events, docs/performance.md).
_DEFAULTS = {"auto.offset.reset": "error", "fetch.queue.backoff.ms": 50, "queued.min.messages": 10_000}


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
        partitions: Callable[[], Iterable[PartitionState]] = tuple,
        gave_back: Callable[[Key, int], None] | None = None,
        log_end_pace_ms: int = 0,
        mirror: OffsetMirror | None = None,
        may_mirror: Callable[[], bool] | None = None,
    ) -> None:
        self._conf = consumer_config(kafka, group)
        self.pacing = LogEndPacing(log_end_pace_ms)
        # The end-of-partition report is what starts a rest (jetkafka.channel._pacing).
        fetch_conf = {**self._conf, "enable.partition.eof": self.pacing.enabled}
        # Client-wide errors (every broker down) reach no message: librdkafka hands them to
        # this callback, on the fetching thread, inside consume().
        fetch_conf["error_cb"] = self._client_error
        self.unreachable_since: float | None = None
        wrap = wrap_consumer or _as_is
        self.consumer = wrap(Consumer(fetch_conf, logger=librdkafka_logger()), "fetch")
        # commit_to_kafka: the mirror's commits go out on a consumer of their own, never assigned
        # anything, whose answers (on_commit) are served every turn, even while the fetch waits.
        self._mirror: MirrorSender | None = None
        if mirror is not None:
            self._mirror = MirrorSender(mirror, str(self._conf["group.id"]), may_mirror, self._holds)
            mirror_conf = {**self._conf, "on_commit": self._mirror.on_commit}
            self._mirror.consumer = wrap(Consumer(mirror_conf, logger=librdkafka_logger()), "mirror")
        self.metadata = BrokerMetadata(
            wrap(Consumer(self._conf, logger=librdkafka_logger()), "metadata"),
            str(self._conf.get("bootstrap.servers", "?")),
            connection_timeout_s,
        )
        self._states = states
        self._on_data = on_data
        self._budget = budget
        self._max_poll = max_poll
        self._commands = FetchCommands(states)
        self._log_ends = LogEndWatch(self.metadata.high_watermarks, budget)
        # Every owned partition, for the share check (``partitions``: the channel's table).
        self.shares = BufferShares(partitions, self._log_ends, gave_back)
        self._next_share_check = 0.0
        self._stop = threading.Event()
        self._assigned: set[Key] = set()  # fetcher thread only
        self._one_topic: str | None = None  # the topic of every assigned partition, if they share one
        self._thread: threading.Thread | None = None
        self.events_fetched = 0

    # -- metadata (any thread): the idle consumer's, see BrokerMetadata ---------------------

    def partition_counts(
        self, topics: tuple[str, ...], timeout: float | None = None, missing_ok: bool = False
    ) -> dict[str, int]:
        return self.metadata.partition_counts(topics, timeout, missing_ok)

    def watermarks(self, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
        return self.metadata.watermarks(topic, partition, timeout)

    def log_ends(self, topic: str, partitions: list[int], earliest: bool, timeout: float = 10.0) -> dict[int, int]:
        return self.metadata.log_ends(topic, partitions, earliest, timeout)

    # -- commands (any thread), each for one lease of a partition ---------------------------

    def assign(self, positions: Iterable[tuple[PartitionState, int]]) -> None:
        """Start fetching each partition at its offset, all in one librdkafka call."""
        self._commands.post([FetchCommand("assign", state.key, state, offset) for state, offset in positions])

    def unassign(self, state: PartitionState) -> None:
        """Stop fetching the partition of ``state`` (not if it is leased again meanwhile)."""
        self._commands.post([FetchCommand("unassign", state.key, state)])

    def seek(self, state: PartitionState, offset: int) -> None:
        """Restart fetching at ``offset``; the caller already called ``state.reposition``."""
        self._commands.post([FetchCommand("seek", state.key, state, offset)])

    def pause(self, state: PartitionState) -> None:
        self._commands.post([FetchCommand("pause", state.key, state)])

    def resume(self, state: PartitionState) -> None:
        """Fetch again (from where the buffer needs it), unless the partition is paused or
        its buffer still holds its share."""
        self._commands.post([FetchCommand("resume", state.key, state)])

    def mirror_commit(self, key: Key, offset: int) -> None:
        """Copy a landed commit to Kafka's group offsets, for standard lag tools: sent by the
        fetcher thread, merged with the partition's next ones within ``commit_interval_ms``."""
        if self._mirror is not None:
            self._mirror.mirror.offer(key, offset)

    # -- the fetcher thread ----------------------------------------------------------------

    def start(self) -> None:
        self._log_ends.start()
        self._thread = threading.Thread(target=self._run, name="jetkafka-fetcher", daemon=True)
        self._thread.start()

    def flush_mirror(self, timeout: float = STOP_WAIT_S + 2) -> bool:
        """Any thread, once the channel released its partitions and while its session runs:
        have the fetcher thread send the mirror's pending offsets (after the commands posted
        before) and wait for their answers; whether it finished within ``timeout``."""
        if self._mirror is None or self._thread is None or not self._thread.is_alive():
            return True
        done = self._mirror.request_flush()
        self._commands.post([])  # wakes an idle fetcher
        return done.wait(timeout)

    def _holds(self, key: Key) -> bool:
        state = self._states(key)
        return state is not None and not state.lost_reason

    def stop(self) -> None:
        self._stop.set()
        self._log_ends.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
        elif self._mirror is not None:  # never started: its consumer is closed here
            self._mirror.close(lambda key: False, wait_s=0)
        self.consumer.close()
        self.metadata.close()

    def _run(self) -> None:
        try:
            self._fetch()
        finally:
            if self._mirror is not None:
                self._mirror.close(self._holds)

    def _fetch(self) -> None:
        consume = self.consumer.consume
        mirror = self._mirror
        while not self._stop.is_set():
            mirror_due = math.inf  # when the mirror's next commit is due (monotonic)
            if mirror is not None:
                if mirror.flush_requested:
                    self._apply_commands()  # the unassigns posted before it send their last copies
                    mirror.flush()
                mirror_due = mirror.send_due(time.monotonic())
            if self._assigned or self._commands.retries_waiting:
                self._apply_commands()
                # Not while the budget is spent: the fetcher does not poll then, so a resumed
                # partition's next end report would not be read and it would fetch in a loop.
                if self.pacing.next_due <= time.monotonic() and not self._budget.spent():
                    self._end_rests()
                if not self._room():
                    continue
                now = time.monotonic()
                # Short polls just after rests end (see LogEndPacing.watch_until), and none
                # that outlasts the next end of a rest.
                timeout = _POLL_S if now >= self.pacing.watch_until else pacing.POLL_S
                # At least 1 ms: the binding truncates to whole milliseconds, and a 0 would
                # spin until the rest's end.
                timeout = max(pacing.POLL_S, min(timeout, self.pacing.next_due - now, mirror_due - now))
            else:
                # Nothing to fetch: wait for a command rather than in consume(), so the first
                # assignment is applied the moment it is posted (or the next mirror commit is due).
                first = self._commands.wait(max(0.0, min(_IDLE_WAIT_S, mirror_due - time.monotonic())))
                if first is not None:
                    self._apply_commands(first)
                    continue
                timeout = 0  # only serve librdkafka's logs and errors
            try:
                msgs = consume(num_messages=self._max_poll, timeout=timeout)
            except KafkaException as exc:  # consumer closed or fatal
                log.error("fetch failed: %s", exc)
                self._stop.wait(1.0)
                continue
            if msgs:
                self.unreachable_since = None
                self._route(msgs)

    def _client_error(self, err: KafkaError) -> None:
        # When librdkafka last said that no broker could be reached, until a message comes again.
        if err.code() == KafkaError._ALL_BROKERS_DOWN and self.unreachable_since is None:
            self.unreachable_since = time.time()
            log.warning("Kafka unreachable (%s); librdkafka keeps retrying", err.str())
        elif err.fatal():
            log.critical("fatal Kafka error: %s", err.str())

    def fetching(self) -> str | None:
        """None while the fetching thread runs and reaches a broker; else why not."""
        if self._thread is None or not self._thread.is_alive():
            return "its fetching thread is not running"
        since = self.unreachable_since
        if since is not None:
            return f"no broker reachable since {time.strftime('%H:%M:%S', time.localtime(since))}"
        return None

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

    def _room(self) -> bool:
        """Whether to poll now: the budget has room, or room was made. While a buffer is
        beyond its share or the budget is spent, the owned partitions are looked at every
        ``CHECK_S`` (:class:`BufferShares`): the fetch of those that must give room back is
        paused here. Otherwise waits for room (at most ``CHECK_S``) and returns False."""
        budget = self._budget
        spent = budget.spent()
        if not budget.over_share:
            self.shares.others_want_room = False
        now = time.monotonic()
        if (spent or budget.over_share) and now >= self._next_share_check:
            self._next_share_check = now + CHECK_S
            for state in self.shares.check(spent):
                self._pause_fetch(state)
            spent = budget.spent()
        if not spent:
            return True
        budget.wait_for_room(CHECK_S)
        return False

    def _end_rests(self) -> None:
        now = time.monotonic()
        ended = [
            (key, state)
            for key, state in self.pacing.due(now)
            if key in self._assigned and self._states(key) is state and may_resume(state)
        ]
        if not ended:
            return
        try:
            self.consumer.resume([TopicPartition(key[0], key[1]) for key, _ in ended])
        except KafkaException as exc:
            log.error("resuming the fetch of %d partitions after their rest failed (%s); trying again", len(ended), exc)
            for key, state in ended:
                self.pacing.rest(key, state, now)
            return
        # Resumes are applied before the seek, so one seek per leader brings all of its
        # partitions back in one fetch; a partition of unknown leader gets a seek of its own.
        # The seek is of the partition furthest on: librdkafka treats a seek to offset 0 of a
        # fetching partition as no change and wakes nothing (a partition never written to, alone
        # on its leader, may so wait up to a second).
        leaders = self.metadata.leaders
        chosen: dict[object, tuple[Key, PartitionState]] = {}
        for key, state in ended:
            leader = leaders.get(key, -1)
            slot: object = leader if leader >= 0 else key
            best = chosen.get(slot)
            if best is None or state.buffer.fetch_next > best[1].buffer.fetch_next:
                chosen[slot] = (key, state)
        for key, state in chosen.values():
            self._wake(key, state)

    def _wake(self, key: Key, state: PartitionState) -> None:
        """Seek a resumed partition to where it stopped: librdkafka's resume alone leaves the
        broker's thread asleep (up to a second) when every partition it fetches was paused,
        which, with the others resting, is the usual case; a seek wakes it."""
        offset = state.buffer.fetch_next
        try:
            self.consumer.seek(TopicPartition(key[0], key[1], offset))
        except KafkaException as exc:
            log.warning("%s[%d]: waking the fetch at offset %d failed (%s); it starts within a second", *key, offset, exc)

    def _log_end_reached(self, key: Key) -> None:
        """librdkafka reported the end of the partition's log: rest (jetkafka.channel._pacing)."""
        state = self._states(key)
        if state is None or key not in self._assigned or not may_resume(state):
            return
        if self.pacing.rest(key, state, time.monotonic()):
            try:
                self.consumer.pause([TopicPartition(key[0], key[1])])
            except KafkaException as exc:
                self.pacing.forget(key)
                log.error("%s[%d]: pausing the fetch at its log end %d failed: %s", *key, state.buffer.fetch_next, exc)

    def _pause_fetch(self, state: PartitionState) -> None:
        if state.key not in self._assigned or self._states(state.key) is not state:
            return
        try:
            self.consumer.pause([TopicPartition(state.topic, state.partition)])
        except KafkaException as exc:
            log.error("%s[%d]: pausing the fetch at offset %d failed: %s", *state.key, state.buffer.fetch_next, exc)

    def _flush(self, key: Key | None, run: list[Any]) -> None:
        if not run or key is None:
            return
        state = self._states(key)
        if state is None:
            return  # released since the fetch: drop
        self.events_fetched += len(run)
        tp = TopicPartition(key[0], key[1])
        if state.buffer.append(run, self._log_end(tp), self.shares.others_want_room):
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
        if code == KafkaError._PARTITION_EOF:
            if key is not None:
                self._log_end_reached(key)
            return
        if code in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET) and key is not None:
            state = self._states(key)
            if state is None:
                return
            if state.buffer.mark_out_of_range():
                log.error(
                    "%s[%d]: fetch offset %d is out of range on the broker", key[0], key[1], state.buffer.fetch_next
                )
                self._on_data(state)
            else:
                log.debug("%s[%d]: out-of-range error of an earlier fetch position ignored (%s)", *key, err.str())
            return
        if err.fatal():
            log.critical("fatal Kafka error: %s", err.str())
        elif code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            log.warning("Kafka unreachable (%s); librdkafka keeps retrying", err.str())
        else:
            log.warning("Kafka error%s: %s", f" on {key[0]}[{key[1]}]" if key else "", err.str())

    def _apply_commands(self, first: list[FetchCommand] | None = None) -> None:
        steps = list(self._commands.steps(first))
        if self._mirror is not None:  # a partition's last commit leaves before it is unassigned
            unassigned = [s for s in steps if isinstance(s, FetchCommand) and s.op == "unassign"]
            if unassigned:
                released = [s.key for s in unassigned if not s.state.lost_reason]
                lost = [s.key for s in unassigned if s.state.lost_reason]
                self._mirror.send_before_unassign(released, lost, time.monotonic())
        for step in steps:
            if isinstance(step, dict) and self._mirror is not None:
                for key, (state, _) in step.items():
                    self._mirror.adopt(key, state, state.committed)
            if isinstance(step, dict):
                # Consecutive (re)assignments reach librdkafka in one call, so its next fetch asks
                # for all of them: a partition assigned alone is fetched alone, and a large answer
                # for it fills librdkafka's queue, which then holds back the fetch of the others
                # for fetch.queue.backoff.ms.
                self._assign(step)
            else:
                self._apply(step)

    def _assign(self, positions: Positions) -> None:
        """Fetch each partition from its offset; one librdkafka call for all of them, or, if
        that fails, one call each, so one bad partition does not hold up the others; one that
        fails alone is tried again later (:meth:`FetchCommands.retry_later`)."""
        try:
            # Re-assigning discards whatever librdkafka pre-fetched from the old position.
            again = [TopicPartition(t, p) for (t, p) in positions if (t, p) in self._assigned]
            if again:
                self.consumer.incremental_unassign(again)
                self._assigned.difference_update(positions)
            self.consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), (_, o) in positions.items()])
        except KafkaException as exc:
            if len(positions) > 1:
                log.warning("assigning %d partitions together failed (%s); assigning one by one", len(positions), exc)
                for key, position in positions.items():
                    self._assign({key: position})
            else:
                for (topic, partition), (state, offset) in positions.items():
                    log.error(
                        "%s[%d]: assign of offset %d failed: %s; trying again in %.0f s",
                        topic,
                        partition,
                        offset,
                        exc,
                        RETRY_S,
                    )
                    self._commands.retry_later((topic, partition), state, offset)
            return
        self._assigned.update(positions)
        self._topics_changed()
        for key, (state, offset) in positions.items():
            self.pacing.forget(key)
            try:
                self._fetching_from(key, state, offset)
            except KafkaException as exc:
                log.error("%s[%d]: setting pause/resume at offset %d failed: %s", key[0], key[1], offset, exc)

    def _topics_changed(self) -> None:
        topics = {topic for topic, _ in self._assigned}
        self._one_topic = topics.pop() if len(topics) == 1 else None

    def _fetching_from(self, key: Key, state: PartitionState, offset: int) -> None:
        tp = TopicPartition(key[0], key[1])
        # librdkafka keeps a partition's pause across unassign/assign: set it anew.
        if state.paused or state.buffer.fetch_paused:
            self.consumer.pause([tp])
        else:
            self.consumer.resume([tp])
        state.buffer.fetching_from(offset)
        log.debug("%s[%d]: fetching from offset %d", key[0], key[1], offset)

    def _apply(self, command: FetchCommand) -> None:
        """Unassign, pause or resume (assignments go through :meth:`_assign`)."""
        key, state, offset = command.key, command.state, command.offset
        part = TopicPartition(key[0], key[1])
        if command.op in ("unassign", "pause", "resume"):
            self.pacing.forget(key)
        try:
            if command.op == "unassign" and key in self._assigned:
                self.consumer.incremental_unassign([part])
                self._assigned.discard(key)
                self._topics_changed()
            elif command.op == "pause" and key in self._assigned:
                self.consumer.pause([part])
            elif command.op == "resume" and key in self._assigned:
                # Stay paused while the user paused it or its buffer still holds its share.
                if state.paused or state.buffer.fetch_paused:
                    return
                restart = state.buffer.resume_offset()
                if restart is not None:  # it gave back its tail: fetch that again
                    self._assign({key: (state, restart)})
                else:
                    self.consumer.resume([part])
                    # The others may all rest (see _wake); a halted partition has no fetch to wake.
                    if self.pacing.enabled and not (state.halted or state.buffer.out_of_range):
                        self._wake(key, state)
        except KafkaException as exc:
            log.error("%s[%d]: %s of offset %d failed: %s", key[0], key[1], command.op, offset, exc)

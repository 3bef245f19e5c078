"""HttpDispatcher: deliver each record of a partition, in order, as a CloudEvent over HTTP.

One channel is one subscription: its group's instances share the topic's partitions, and each
partition's records are POSTed to ``url`` one after the other. Several subscriptions of a topic
are several channels with different groups (in one process or many); each scales by running
more instances of its group. See ``docs/cloudevents.md``.

How a record is handled (per partition in offset order, or per record key under
``channel.ordering: key``, where a partition's keys are delivered concurrently; record *n+1* of
the partition, or of the key, is never sent before record *n* is finished):

1. it becomes a CloudEvent (:mod:`jetkafka.processors.cloudevents._encoding`) and is POSTed;
2. a 2xx answer finishes it (delivered);
3. a retryable failure (:mod:`jetkafka.processors.cloudevents._delivery`) ends the batch there: the
   response commits what came before and asks the channel to come back to this record after
   the back-off (``BatchResponse.advance().seek(offset).wait(ms)``). The worker thread is free
   meanwhile, and a release or shutdown does not wait for the back-off;
4. a record that is not retryable, or out of retries, or not a valid CloudEvent goes to the
   dead-letter sink once, with error extensions, and its offset is committed at once; without
   a sink it is dropped (logged, counted);
5. a dead-letter sink that fails keeps the record: it is offered to the sink again after a
   back-off, never POSTed to the subscriber again, and never committed past.

Every event sent (to the subscriber or a dead-letter URL or topic) carries the extension
attribute ``jetkafkaepoch``: the fencing token of the partition hold it was sent under
(``ChannelContext.fencing_token``). A later owner of the partition always sends a greater one,
so a subscriber that keeps the greatest token per (topic, partition) can refuse a sender that
lost the partition and still sends (a frozen process woken up). Tracing headers
(``traceparent``, ``tracestate``) travel as before; with tracing on, the POST's are those of its
delivery span and the producer's stay in the event (:mod:`._trace_context`).

A partition moved by an offset reset or the out-of-range policy (:meth:`HttpDispatcher.on_reposition`)
forgets its unfinished record: retries and dead-letter attempts of the old position are void,
and the record at the new position starts as a first delivery.

Guarantees: every record is delivered (2xx) or acknowledged by the dead-letter sink before
its offset is committed (at least once). A batch ends with a commit of everything finished,
made before the partition's next batch starts and not left to the commit pipeline (which merges
advances into one commit per ``channel.commit_interval_ms`` while records keep coming), so after a crash only the records
finished since the last commit are sent again: at most the batch in flight
(``channel.batch_max_events`` records, started at the committed offset). When ZooKeeper does
not answer that commit, the batch's ``advance()`` carries it and the channel retries it; until
it lands a crash re-sends the batches finished meanwhile. A
dead-lettered record is committed before the next record is sent, so it is dead-lettered twice
only if the process dies between the sink's acknowledgement and that commit. A graceful
release or shutdown sends nothing twice: ``on_stream_termination`` commits what was finished.
A batch that has been delivering for ``max_turn_ms`` commits and gives the partition back, so
a release waits at most about ``max_turn_ms`` plus one request timeout. A batch stops before its
next record once the instance's local lease ran out (a process frozen past its session timeout
and woken: :meth:`ChannelContext.lease_valid`), so such a process sends at most the record it
was sending when it froze, not the rest of its batch.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry

from jetkafka.coordination._errors import CommitUncertain
from jetkafka.errors import PartitionLost, ProcessorError
from jetkafka.events import Event, EventBatch, Key, PartitionSource
from jetkafka.processors._base import BatchEventProcessor, BatchResponse
from jetkafka.processors.cloudevents._dead_letter import (
    DeadLetterFailed,
    DeadLetterTarget,
    TopicDeadLetter,
    UrlDeadLetter,
)
from jetkafka.processors.cloudevents._delivery import HttpSender, RetryPolicy, invalid, whole
from jetkafka.processors.cloudevents._encoding import CONTENT_MODES, EncodingError, RecordEncoder, error_extensions
from jetkafka.processors.cloudevents._metrics import DispatchMetrics
from jetkafka.processors.cloudevents._trace_context import traced_post, tracing_extensions

if TYPE_CHECKING:
    from jetkafka.channel._context import ChannelContext

log = logging.getLogger(__name__)

_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
# A sink that keeps failing is not hammered even with delay_ms: 0.
_MIN_DEAD_LETTER_WAIT_MS = 100
# After an unexpected error on a record, come back to it after this long.
_ERROR_WAIT_MS = 1000
# The fencing-token extension attribute: CloudEvents extension names are lower-case letters and
# digits (at most 20), and jetkafka's own attributes share the "jetkafka" prefix.
EPOCH_ATTRIBUTE = "jetkafkaepoch"


@dataclass
class _Pending:
    """A record of a partition that is not finished: retries or the dead-letter sink are due."""

    offset: int
    first_attempt: float
    attempts: int = 0
    reason: str = ""
    status: int | None = None
    body: bytes = b""
    exhausted: bool = False  # delivery given up: only the dead-letter sink is tried
    dead_letter_attempts: int = 0


def _check_url(path: str, url: Any) -> str:
    if not isinstance(url, str) or (parts := urlsplit(url)).scheme not in ("http", "https") or not parts.netloc:
        raise invalid(path, f"{url!r} is not an http:// or https:// URL", f"write {path}: http://host:port/path")
    return url


def _resume_at(
    source: PartitionSource, offset: int, last: int, wait_ms: int = 0, commit_now: bool = True, because: str | None = None
) -> BatchResponse:
    """Commit everything before ``offset`` and read on from it (after ``wait_ms``).

    The commit is made here, before the partition's next batch, so that a crash re-sends at
    most the batch in flight; the pipeline would fold several batches into one commit per
    interval. With ``commit_now`` false (ZooKeeper disconnected, or the local lease ran out: a
    call now would wait for the connection) or when the commit fails for any reason but
    fencing, it is left to the response's ``advance()``, which the channel sends and retries
    once it may; until then a crash re-sends what was delivered since the last commit. A
    refused commit raises :class:`CommitFenced` (the partition is lost, nothing more of it is
    sent).
    """
    if commit_now and source.committed_offset != offset:
        try:
            source.commit(offset)
        except PartitionLost:
            raise
        except Exception as exc:  # noqa: BLE001 - an early commit only: the channel commits the offset anyway
            log.warning("%s[%d] offset %d: commit postponed to the channel (%s: %s)",
                        source.topic, source.partition, offset, type(exc).__name__, exc)
    response = BatchResponse.advance()
    if offset <= last:
        response.seek(offset)
    if wait_ms:
        response.wait(wait_ms, because)
    return response


class HttpDispatcher(BatchEventProcessor):
    """POSTs each record as a CloudEvent to ``url``; see the module documentation.

    Options (``processor.options``): ``url``; ``event_type`` and ``event_source`` (for records
    that are not CloudEvents; ``{topic}`` in the source is replaced); ``content_type`` (their
    ``datacontenttype`` when the record has no ``content-type`` header); ``content_mode``
    (``as-received``, ``binary`` or ``structured``); ``retry`` (see
    :class:`~jetkafka.processors.cloudevents._delivery.RetryPolicy`); ``dead_letter`` (``{url: ...}`` or
    ``{topic: ...}``); ``subscription`` (metric label, default the channel's group);
    ``max_turn_ms``. ``registry`` (Python only) receives the metrics instead of the default.
    """

    def __init__(
        self,
        url: str,
        event_type: str = "dev.jetkafka.record",
        event_source: str = "/jetkafka/{topic}",
        content_type: str | None = None,
        content_mode: str = "as-received",
        retry: Mapping[str, Any] | None = None,
        dead_letter: Mapping[str, Any] | None = None,
        subscription: str | None = None,
        max_turn_ms: int = 5000,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.url = _check_url("url", url)
        for name, value in (("event_type", event_type), ("event_source", event_source)):
            if not isinstance(value, str) or not value.strip():
                raise invalid(name, f"expected a non-empty string, got {value!r}", f"write {name}: com.example.{name}")
        if content_type is not None and (not isinstance(content_type, str) or "/" not in content_type):
            raise invalid("content_type", f"{content_type!r} is not a media type", "write content_type: application/json")
        if content_mode not in CONTENT_MODES:
            raise invalid(
                "content_mode", f"{content_mode!r} is not one of {', '.join(CONTENT_MODES)}", "write content_mode: as-received"
            )
        if subscription is not None and (not isinstance(subscription, str) or not subscription):
            raise invalid("subscription", f"expected a non-empty string, got {subscription!r}", "write subscription: orders-to-billing")
        self.policy = RetryPolicy.from_options(retry)
        self.max_turn_s = whole("max_turn_ms", max_turn_ms, 1, 3_600_000) / 1000
        self._encoder = RecordEncoder(event_type, event_source, content_type, content_mode)
        self._sender = HttpSender(self.policy.timeout_ms)
        self._dead_letter_topic: str | None = None
        self._dead_letter: DeadLetterTarget | None = self._dead_letter_option(dead_letter)
        self._subscription_option = subscription
        self.subscription = subscription or url
        self._metrics = DispatchMetrics.for_registry(registry)
        self._context: ChannelContext | None = None
        self._stopping = threading.Event()
        # The unfinished record of each batch in flight, by (topic, partition, offset): under
        # channel.ordering key or none several batches of one partition run at once, each with
        # its own record being retried.
        self._pending: dict[tuple[str, int, int], _Pending] = {}

    def _dead_letter_option(self, option: Mapping[str, Any] | None) -> DeadLetterTarget | None:
        if option is None:
            return None
        if not isinstance(option, Mapping) or len(option) != 1 or next(iter(option)) not in ("url", "topic"):
            raise invalid(
                "dead_letter", f"expected one of url or topic, got {option!r}", "write dead_letter: {url: http://...} or {topic: name}"
            )
        if "url" in option:
            return UrlDeadLetter(_check_url("dead_letter.url", option["url"]), self._sender, self._encoder.mode_for)
        topic = option["topic"]
        if not isinstance(topic, str) or not _TOPIC.match(topic):
            raise invalid("dead_letter.topic", f"{topic!r} is not a topic name", "use letters, digits, '.', '_' and '-'")
        self._dead_letter_topic = topic  # the producer needs the channel's Kafka settings: on_start
        return None

    # -- life cycle --------------------------------------------------------------------------

    def on_start(self, context: ChannelContext) -> None:
        self._context = context
        self._stopping.clear()
        self.subscription = self._subscription_option or context.group
        topic = self._dead_letter_topic
        if topic is not None:
            if topic in context.config.channel.topics:
                # Raised from start(), outside the loader: a JetkafkaError is shown as a message.
                raise ProcessorError(
                    str(invalid("dead_letter.topic", f"{topic!r} is a topic this channel consumes: failures would loop",
                                "name another topic"))
                )
            self._dead_letter = TopicDeadLetter(context.config.kafka, topic, context.group)
        log.info(
            "subscription %s: delivering to %s (retries %d, %s back-off from %d ms, dead letters to %s)",
            self.subscription,
            self.url,
            self.policy.count,
            self.policy.backoff,
            self.policy.delay_ms,
            self._dead_letter.name if self._dead_letter is not None else "nowhere (dropped)",
        )

    def on_stop(self) -> None:
        self._stopping.set()
        self._sender.close()
        if self._dead_letter is not None:
            self._dead_letter.close()
        if self._dead_letter_topic is not None:
            self._dead_letter = None  # a new producer on the next start

    # -- the partition's callbacks -----------------------------------------------------------

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        key = (source.topic, source.partition)
        hold = self._hold(key)
        # The hold's token, read once per batch: the batch is sent under this hold or not at all.
        token = getattr(hold, "epoch", None)
        deadline = time.monotonic() + self.max_turn_s
        last = events.last_offset
        for index, record in enumerate(events):
            offset = record.offset
            if self._stopping.is_set() or (index and time.monotonic() >= deadline):
                return self._resume_at(source, offset, last)  # release and shutdown get their turn
            if index and self._context is not None and not self._context.lease_valid():
                # A process woken after its session may have expired: another instance may be
                # sending these records by now. Stop here; the commit of what was sent is fenced.
                log.warning("%s[%d] offset %d: no answer from ZooKeeper within the local lease; the rest of "
                            "the batch waits", source.topic, source.partition, offset)
                return _resume_at(source, offset, last, commit_now=False)
            if index and self._hold(key) is not hold:
                raise PartitionLost(source.topic, source.partition, "lost while delivering")
            try:
                wait_ms = self._deliver(source, record, token)
            except PartitionLost:
                raise
            except Exception:
                # A bug or an unexpected library error: keep what was delivered, retry this record.
                log.exception("%s[%d] offset %d: delivery raised; trying again in %d ms",
                              source.topic, source.partition, offset, _ERROR_WAIT_MS)
                return self._resume_at(source, offset, last, _ERROR_WAIT_MS, "delivery raised (see the log)")
            if wait_ms is not None:
                # Shown as the partition's failure until the record is delivered or dead-lettered.
                pending = self._pending.get((*key, offset))
                because = f"{self.url}: {pending.reason}" if pending is not None and pending.reason else None
                return self._resume_at(source, offset, last, wait_ms, because)
        return self._resume_at(source, last + 1, last)

    def _resume_at(
        self, source: PartitionSource, offset: int, last: int, wait_ms: int = 0, because: str | None = None
    ) -> BatchResponse:
        connected = self._context is None or self._context.may_act()
        return _resume_at(source, offset, last, wait_ms, commit_now=connected, because=because)

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        self._forget(source)
        return BatchResponse.advance()  # the position is always the first unfinished record

    def on_reposition(self, source: PartitionSource, old_offset: int, reason: str) -> None:
        """An offset reset or the out-of-range policy moved the partition: the unfinished record
        of the old position is void (its retry count, back-off and dead-letter state go), and
        the next batch starts at the new position as a first delivery."""
        for pending in self._forget(source):
            log.warning(
                "%s[%d]: repositioned (%s) from offset %d to %d: delivery of offset %d (%d attempt(s)) abandoned",
                source.topic, source.partition, reason, old_offset, source.head_offset, pending.offset,
                pending.attempts,
            )

    def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
        if isinstance(error, PartitionLost):
            self._forget(source)
        return None

    def _forget(self, source: PartitionSource) -> list[_Pending]:
        """Drop the unfinished records of ``source``'s partition; the dropped ones."""
        mine = [k for k in list(self._pending) if k[:2] == (source.topic, source.partition)]
        return [p for p in (self._pending.pop(k, None) for k in mine) if p is not None]

    # -- one record ----------------------------------------------------------------------------

    def _hold(self, key: Key) -> object:
        return None if self._context is None else self._context.hold(*key)

    def _labels(self, record: Event) -> tuple[str, str, str]:
        return (self.subscription, record.topic, str(record.partition))

    def _deliver(self, source: PartitionSource, record: Event, token: int | None) -> int | None:
        """Finish ``record`` (None), or the milliseconds after which to come back to it.
        ``token`` is the fencing token of the hold the batch is sent under."""
        key = (source.topic, source.partition, record.offset)
        pending = self._pending.get(key)
        if pending is None:
            pending = _Pending(record.offset, time.monotonic())
        self._pending[key] = pending
        fencing = {} if token is None else {EPOCH_ATTRIBUTE: token}
        if pending.exhausted:
            return self._give_up(source, record, pending, fencing)
        try:
            event = self._encoder.decode(record)
            headers, body = event.to_http(self._encoder.mode_for(event), {**fencing, **tracing_extensions(event)})
        except EncodingError as exc:
            pending.reason, pending.exhausted = f"not a valid CloudEvent: {exc}", True
            log.error("%s[%d] offset %d: %s", record.topic, record.partition, record.offset, pending.reason)
            return self._give_up(source, record, pending, fencing)
        attempt = traced_post(self._sender, self.url, headers, body, event)
        pending.attempts += 1
        if attempt.ok:
            del self._pending[key]
            self._metrics.delivered.labels(*self._labels(record)).inc()
            self._metrics.latency.labels(self.subscription, record.topic).observe(time.monotonic() - pending.first_attempt)
            return None
        pending.reason, pending.status, pending.body = attempt.describe(), attempt.status, attempt.body
        retries = pending.attempts - 1
        if self.policy.retryable(attempt.status) and retries < self.policy.count:
            wait_ms = self.policy.wait_ms(retries + 1, attempt.status, attempt.retry_after)
            self._metrics.retried.labels(*self._labels(record)).inc()
            log.warning(
                "%s[%d] offset %d: delivery to %s failed (%s); retry %d of %d in %d ms",
                record.topic, record.partition, record.offset, self.url, pending.reason, retries + 1,
                self.policy.count, wait_ms,
            )
            return wait_ms
        pending.exhausted = True
        log.error(
            "%s[%d] offset %d: delivery to %s failed (%s) after %d attempt(s)%s",
            record.topic, record.partition, record.offset, self.url, pending.reason, pending.attempts,
            "" if self.policy.retryable(attempt.status) else "; not retryable",
        )
        return self._give_up(source, record, pending, fencing)

    def _give_up(
        self, source: PartitionSource, record: Event, pending: _Pending, fencing: Mapping[str, Any]
    ) -> int | None:
        """Hand the record to the dead-letter sink (or drop it without one)."""
        key = (source.topic, source.partition, record.offset)
        labels = self._labels(record)
        sink = self._dead_letter
        if sink is None:
            del self._pending[key]
            self._metrics.dropped.labels(*labels).inc()
            log.error("%s[%d] offset %d: dropped, no dead_letter configured (%s)",
                      record.topic, record.partition, record.offset, pending.reason)
            return None
        try:
            event = self._encoder.decode(record)
        except EncodingError:
            event = self._encoder.plain(record)  # dead-letter what could not be read, as it is
        extensions = {
            **error_extensions(self.url, pending.reason, pending.status, pending.body, pending.attempts, record),
            **fencing,
        }
        try:
            sink.send(record, event, extensions, pending.attempts)
        except DeadLetterFailed as exc:
            pending.dead_letter_attempts += 1
            wait_ms = max(_MIN_DEAD_LETTER_WAIT_MS, self.policy.backoff_ms(pending.dead_letter_attempts))
            self._metrics.dead_letter_failed.labels(*labels).inc()
            log.error("%s[%d] offset %d: %s; the record is kept and offered again in %d ms",
                      record.topic, record.partition, record.offset, exc, wait_ms)
            return wait_ms
        del self._pending[key]
        self._metrics.dead_lettered.labels(*labels).inc()
        log.error("%s[%d] offset %d: sent to dead-letter %s (%s)",
                  record.topic, record.partition, record.offset, sink.name, pending.reason)
        try:
            # Committed now, not at the end of the batch: a crash must not dead-letter it twice.
            source.commit(record.offset + 1)
        except CommitUncertain as exc:
            log.warning("%s[%d] offset %d: commit after dead-letter postponed (%s); the batch's commit will cover it",
                        record.topic, record.partition, record.offset, exc)
        return None


__all__ = ["HttpDispatcher"]

"""Kafka records as CloudEvents, and CloudEvents as HTTP requests, with the official SDK.

A record is read the way the CloudEvents Kafka binding says:

- **binary** when it has a ``ce_specversion`` header: ``ce_*`` headers are the attributes,
  ``content-type`` is ``datacontenttype``, the value is the data;
- **structured** when its ``content-type`` is ``application/cloudevents+json``: the value is
  the whole event in JSON;
- otherwise a **plain** record becomes an event of the configured ``type`` and ``source``,
  ``id`` ``<topic>-<partition>-<offset>`` (stable, so a subscriber can drop re-deliveries),
  ``time`` the record's timestamp and ``datacontenttype`` its ``content-type`` header.

In all three a record key that is UTF-8 becomes the ``partitionkey`` extension (the binding's
rule), and an event without ``time`` gets the record's timestamp, so that every attempt of
one record sends the same event. Other headers (``traceparent``, ``tracestate``, anything
not ``ce_``-prefixed and not hop-by-hop) go along as HTTP headers.

Sent in binary content mode, the body is the record's value byte for byte; in structured
mode the SDK writes the event as JSON.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from cloudevents.core.base import BaseCloudEvent, EventFactory
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.bindings import kafka as ce_kafka
from cloudevents.core.bindings.common import get_event_factory_for_version
from cloudevents.core.formats.json import JSONFormat

from jetkafka.errors import JetkafkaError

log = logging.getLogger(__name__)

Mode = Literal["binary", "structured"]
CONTENT_MODES = ("as-received", "binary", "structured")
STRUCTURED_JSON = "application/cloudevents+json"
REQUIRED = ("id", "source", "type", "specversion")
# Never forwarded: they describe one connection or are set from the event itself.
NOT_FORWARDED = frozenset(
    {"content-type", "content-length", "host", "connection", "keep-alive", "transfer-encoding", "te", "trailer",
     "upgrade", "proxy-authorization", "proxy-connection", "expect"}
)
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_FORMAT = JSONFormat()


class EncodingError(JetkafkaError, ValueError):
    """A record claims to be a CloudEvent but is not a valid one."""


class Record(Protocol):
    """What is read of a record (``jetkafka.events.Event`` has all of it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def timestamp(self) -> int | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


@dataclass(frozen=True)
class RecordEvent:
    """A record as a CloudEvent, in the parts needed to send it either way."""

    attributes: dict[str, Any]
    raw: bytes | None  # the record value: the body in binary mode; None for structured records
    parsed: Any  # the data of a structured record
    received: Mode | Literal["plain"]
    forward: dict[str, str] = field(default_factory=dict)  # headers passed through

    def data(self, raw: bool) -> Any:
        if self.raw is None:
            return self.parsed
        if raw:
            return self.raw
        # Parsed only for structured output: binary output never pays for it.
        return _FORMAT.read_data(self.raw, self.attributes.get("datacontenttype"))

    def event(self, extensions: Mapping[str, Any] | None = None, raw: bool = False) -> BaseCloudEvent:
        attributes = {**self.attributes, **(extensions or {})}
        factory = get_event_factory_for_version(attributes["specversion"])
        return factory(attributes, self.data(raw))

    def to_http(self, mode: Mode, extensions: Mapping[str, Any] | None = None) -> tuple[dict[str, str], bytes]:
        """Headers and body of the POST in ``mode``, with ``extensions`` added to the event."""
        if mode == "binary":
            message = ce_http.to_binary(self.event(extensions, raw=True), _FORMAT)
        else:
            message = ce_http.to_structured(self.event(extensions), _FORMAT)
        headers = {name: value for name, value in self.forward.items() if name.lower() not in message.headers}
        headers.update(message.headers)
        return headers, message.body

    def to_kafka(self, extensions: Mapping[str, Any] | None = None) -> tuple[list[tuple[str, bytes]], bytes]:
        """Headers and value of a Kafka record in binary content mode, ``extensions`` added."""
        message = ce_kafka.to_binary(self.event(extensions, raw=True), _FORMAT)
        headers = [(k, v.encode()) for k, v in self.forward.items()]
        return headers + list(message.headers.items()), message.value


class RecordEncoder:
    """Turns records into :class:`RecordEvent` and picks the content mode to send them in."""

    def __init__(self, event_type: str, event_source: str, content_type: str | None, content_mode: str) -> None:
        self.event_type = event_type
        self.event_source = event_source
        self.content_type = content_type
        self.content_mode = content_mode

    def mode_for(self, record_event: RecordEvent) -> Mode:
        if self.content_mode == "binary":
            return "binary"
        if self.content_mode == "structured":
            return "structured"
        return "structured" if record_event.received == "structured" else "binary"

    def decode(self, record: Record) -> RecordEvent:
        """The record as an event; raises :class:`EncodingError` for an invalid CloudEvent."""
        headers: dict[str, bytes] = {}
        for name, value in record.headers:
            if value is not None:
                headers[name.lower()] = value
        forward = _forwarded(record, headers)
        content_type = _text(headers.get("content-type"))
        if "ce_specversion" in headers:
            return self._from_binary(record, headers, forward)
        if content_type is not None and content_type.split(";")[0].strip().lower().startswith("application/cloudevents"):
            return self._from_structured(record, headers, content_type, forward)
        return self.plain(record, forward)

    def plain(self, record: Record, forward: dict[str, str] | None = None) -> RecordEvent:
        """The record as an event of the configured type and source, whatever its headers."""
        headers = {name.lower(): value for name, value in record.headers if value is not None}
        if forward is None:
            forward = _forwarded(record, headers)
        attributes: dict[str, Any] = {
            "specversion": "1.0",
            "id": f"{record.topic}-{record.partition}-{record.offset}",
            "source": self.event_source.replace("{topic}", record.topic),
            "type": self.event_type,
        }
        content_type = _text(headers.get("content-type")) or self.content_type
        if content_type:
            attributes["datacontenttype"] = content_type
        _add_time(attributes, record)
        key = _text(record.key)
        if key:
            attributes[ce_kafka.PARTITIONKEY_ATTR] = key
        return RecordEvent(attributes, record.value or b"", None, "plain", forward)

    def _from_binary(self, record: Record, headers: dict[str, bytes], forward: dict[str, str]) -> RecordEvent:
        # Only the attribute headers, and no value: the SDK decodes every header it is given as
        # UTF-8, and the data is sent as it is (parsed later only for structured output).
        attribute_headers = {k: v for k, v in headers.items() if k.startswith("ce_") or k == "content-type"}
        message = ce_kafka.KafkaMessage(headers=attribute_headers, key=_text(record.key) or None, value=b"")
        event = _parse(lambda factory: ce_kafka.from_binary(message, _FORMAT, factory), record)
        return RecordEvent(event.get_attributes(), record.value or b"", None, "binary", forward)

    def _from_structured(
        self, record: Record, headers: dict[str, bytes], content_type: str, forward: dict[str, str]
    ) -> RecordEvent:
        if content_type.split(";")[0].strip().lower() != STRUCTURED_JSON:
            raise EncodingError(f"structured format {content_type!r} is not supported, only {STRUCTURED_JSON}")
        message = ce_kafka.KafkaMessage(headers={}, key=_text(record.key) or None, value=record.value or b"")
        event = _parse(lambda factory: ce_kafka.from_structured(message, _FORMAT, factory), record)
        return RecordEvent(event.get_attributes(), None, event.get_data(), "structured", forward)


def _parse(read: Callable[[EventFactory], BaseCloudEvent], record: Record) -> BaseCloudEvent:
    def factory(attributes: dict[str, Any], data: Any) -> BaseCloudEvent:
        # The SDK would invent a random id for a missing one: refuse instead, so every attempt
        # of a record carries the same id.
        missing = [name for name in REQUIRED if not attributes.get(name)]
        if missing:
            raise EncodingError(f"missing required attribute(s) {', '.join(missing)}")
        _add_time(attributes, record)
        return get_event_factory_for_version(str(attributes["specversion"]))(attributes, data)

    try:
        return read(factory)
    except EncodingError:
        raise
    except Exception as exc:  # the SDK raises many kinds for bad input
        raise EncodingError(f"{type(exc).__name__}: {exc}") from exc


def _add_time(attributes: dict[str, Any], record: Record) -> None:
    if "time" not in attributes and record.timestamp is not None:
        attributes["time"] = datetime.fromtimestamp(record.timestamp / 1000, tz=UTC)


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _forwarded(record: Record, headers: Mapping[str, bytes]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers.items():
        if name.startswith(("ce_", "ce-")) or name in NOT_FORWARDED or not _TOKEN.match(name):
            continue
        text = _text(value)
        if text is None or not text.isprintable() or text != text.strip():
            log.debug("%s[%d] offset %d: header %r not forwarded (not a valid HTTP header value)",
                      record.topic, record.partition, record.offset, name)
            continue
        out[name] = text
    return out


def error_extensions(
    destination: str, reason: str, status: int | None, body: bytes, attempts: int, record: Record
) -> dict[str, Any]:
    """The extensions a dead-lettered event carries: where it failed, how, and from which record."""
    extensions: dict[str, Any] = {
        "knativeerrordest": destination,
        "jetkafkaerror": reason[:1024],
        "jetkafkaattempts": attempts,
        "jetkafkarecord": f"{record.topic}/{record.partition}/{record.offset}",
    }
    if status is not None:
        extensions["knativeerrorcode"] = status
    if body:
        extensions["knativeerrordata"] = base64.b64encode(body[:768]).decode("ascii")
    return extensions

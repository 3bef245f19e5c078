"""Dead-letter sink: records given up on are produced to a topic before the channel moves on.

Guarantee: the channel commits past a dead-lettered record only after the broker acknowledged
it (``acks=all``, waited for), so a record is never lost between the topic and the dead-letter
topic. If producing fails, the record is retried like a failing batch.

Each dead-lettered record keeps its key, value, timestamp and headers, and gains headers
naming where it came from and why it failed (all values UTF-8):
``jetkafka.error.class``, ``jetkafka.error.message`` (at most 1,024 characters),
``jetkafka.source.topic``, ``jetkafka.source.partition``, ``jetkafka.source.offset``,
``jetkafka.group``, ``jetkafka.attempts``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from jetkafka._client_logs import librdkafka_logger
from jetkafka.channel._errors import DeadLetterError

log = logging.getLogger(__name__)

# Consumer-only properties a producer would only warn about.
_CONSUMER_ONLY = ("group.id", "receive.message.max.bytes", "queued.", "fetch.", "session.timeout", "isolation.")


class DeadLetterSink:
    def __init__(self, kafka: Mapping[str, Any], topic: str, group: str, timeout_s: float = 30.0) -> None:
        conf = {k: v for k, v in kafka.items() if not k.startswith(_CONSUMER_ONLY)}
        conf.update({"acks": "all", "enable.idempotence": True})
        self.topic = topic
        self._group = group
        self._timeout = timeout_s
        self._producer = Producer(conf, logger=librdkafka_logger())
        self._lock = threading.Lock()

    def send(self, message: Any, error: BaseException, attempts: int) -> None:
        headers = list(message.headers() or [])
        headers += [
            ("jetkafka.error.class", type(error).__name__.encode()),
            ("jetkafka.error.message", str(error)[:1024].encode()),
            ("jetkafka.source.topic", message.topic().encode()),
            ("jetkafka.source.partition", str(message.partition()).encode()),
            ("jetkafka.source.offset", str(message.offset()).encode()),
            ("jetkafka.group", self._group.encode()),
            ("jetkafka.attempts", str(attempts).encode()),
        ]
        result: list[KafkaError | None] = []
        kind, ts = message.timestamp()
        with self._lock:
            try:
                self._producer.produce(
                    self.topic,
                    value=message.value(),
                    key=message.key(),
                    headers=headers,
                    timestamp=ts if kind else 0,
                    on_delivery=lambda err, msg: result.append(err),
                )
            except (KafkaException, BufferError) as exc:
                raise DeadLetterError(f"cannot produce to dead-letter topic {self.topic}: {exc}") from exc
            self._producer.flush(self._timeout)
        if not result:
            raise DeadLetterError(f"dead-letter topic {self.topic} did not acknowledge within {self._timeout:g} s")
        if result[0] is not None:
            raise DeadLetterError(f"dead-letter topic {self.topic} refused the record: {result[0].str()}")

    def close(self) -> None:
        self._producer.flush(self._timeout)

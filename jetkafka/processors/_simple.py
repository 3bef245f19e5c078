"""SimpleKafkaProcessor: hand each batch to a plain function, with a chosen commit policy.

Policies (``auto_advance``) and their delivery guarantees:

- ``every-batch`` (default): the handler runs, then the batch is committed. At least once;
  after a crash, per partition, the batch in hand and those handled since the last commit
  landed (``channel.commit_interval_ms`` of them at most) are delivered again.
- ``periodic``: the handler runs; offsets are committed when ``interval_ms`` has passed since
  the last commit of the partition, when the partition goes idle and when it is released. At
  least once; after a crash, up to ``interval_ms`` of events per partition (or, when the
  traffic stopped, those since the last commit) are delivered again. Fewer ZooKeeper writes.
- ``no-duplication``: the batch is committed *before* the handler runs. At most once; after a
  crash the batch in hand is not delivered again, and a batch whose handler raised is not
  retried (it may have been handled in part).

In every mode an offset out of the broker's range is the channel's to move
(``channel.on_out_of_range``), and a lost partition the channel's to drop: neither is a
handler's failure.

Threads: every callback runs on the worker thread holding the partition; the periodic mode's
last-commit times are shared by the workers under a lock.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Literal

from jetkafka.errors import PartitionLost
from jetkafka.events import EventBatch, PartitionSource
from jetkafka.processors._base import BatchEventProcessor, BatchResponse

log = logging.getLogger(__name__)

AutoAdvance = Literal["every-batch", "periodic", "no-duplication"]
Handler = Callable[[EventBatch], object]


def _resolve(handler: Handler | str) -> Handler:
    if callable(handler):
        return handler
    module_name, sep, attr = str(handler).partition(":")
    if not sep:
        raise ValueError(f"handler {handler!r} must be a callable or 'module:function'")
    fn: object = getattr(importlib.import_module(module_name), attr)
    if not callable(fn):
        raise ValueError(f"handler {handler!r} is not callable")
    return fn


class SimpleKafkaProcessor(BatchEventProcessor):
    """Calls ``handler(events)`` for each batch; commits per ``auto_advance``."""

    def __init__(
        self,
        handler: Handler | str,
        auto_advance: AutoAdvance = "every-batch",
        interval_ms: int = 5000,
    ) -> None:
        if auto_advance not in ("every-batch", "periodic", "no-duplication"):
            raise ValueError(
                f"auto_advance must be every-batch, periodic or no-duplication, got {auto_advance!r}"
            )
        if interval_ms < 0:
            raise ValueError(f"interval_ms must be >= 0, got {interval_ms}")
        self.handler = _resolve(handler)
        self.auto_advance = auto_advance
        self.interval_s = interval_ms / 1000
        self._last_commit: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if self.auto_advance == "no-duplication":
            source.commit(events.last_offset + 1)
            self.handler(events)
            return BatchResponse.get_next()
        self.handler(events)
        if self.auto_advance == "every-batch":
            return BatchResponse.advance()
        key = (source.topic, source.partition)
        now = time.monotonic()
        with self._lock:
            last = self._last_commit.setdefault(key, now)
            if now - last < self.interval_s:
                return BatchResponse.get_next()
            self._last_commit[key] = now
        return BatchResponse.advance()

    def on_idle(self, source: PartitionSource) -> BatchResponse | None:
        return BatchResponse.advance() if self.auto_advance == "periodic" else None

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        with self._lock:
            self._last_commit.pop((source.topic, source.partition), None)
        return BatchResponse.advance() if self.auto_advance != "no-duplication" else None

    def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
        """Runs on the worker thread holding the partition. In ``no-duplication`` mode a batch
        whose handler raised after its commit is logged and skipped (``get_next()``). Everything
        else is the channel's to handle (``None``): a lost partition, and an offset out of the
        broker's range, which ``channel.on_out_of_range`` moves; answering that one with
        ``get_next()`` would keep the partition where the broker has nothing, turn after turn."""
        # Imported here: the channel imports the processors.
        from jetkafka.channel._errors import OffsetOutOfRange

        if isinstance(error, (OffsetOutOfRange, PartitionLost)):
            return None
        if self.auto_advance == "no-duplication" and source.committed_offset == source.next_offset:
            log.error(
                "%s[%d]: handler failed on offsets %d..%d; not retried (no-duplication): %s",
                source.topic,
                source.partition,
                source.head_offset,
                source.next_offset - 1,
                error,
            )
            return BatchResponse.get_next()
        return None

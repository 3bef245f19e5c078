"""A traced run in a process of its own, exporting over OTLP/HTTP to ``argv[1]``.

The process sets tracing up as a channel does (the :class:`TracingAddOn` at start, from a
configuration's ``tracing:`` section), takes a partition, delivers two batches through the
CloudEvents dispatcher to a test subscriber, gives the partition up and stops (which flushes
the spans). Run by test_otlp_export.py: a process of its own, because the global tracer
provider can be set once per process.
"""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from jetkafka import BatchResponse, EventBatch, PartitionSource, parse_config
from jetkafka._tracing._add_on import TracingAddOn
from jetkafka._tracing._logs import log_format
from jetkafka.processors._calls import deliver_batch
from jetkafka.processors.cloudevents import HttpDispatcher
from tests.support.http_subscriber import HttpSubscriber
from tests.tracing.support import TOPIC, FakeMessage, traced

GROUP = "billing"
log = logging.getLogger("tests.tracing.run")


class LoggingDispatcher(HttpDispatcher):
    """The dispatcher, with a log line of the application's own at the start of each batch."""

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        log.info("%s[%d]: delivering offsets %d..%d", source.topic, source.partition, events.first_offset,
                 events.last_offset)
        return super().on_next_batch(source, events)
PRODUCER_1 = (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7)
PRODUCER_2 = (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)


def main(endpoint: str) -> None:
    config = parse_config(
        {
            "zookeeper": {"connect": "127.0.0.1:2181"},
            "kafka": {"bootstrap.servers": "127.0.0.1:9092"},
            "channel": {"group": GROUP, "topics": [TOPIC]},
            "tracing": {"enabled": True, "endpoint": endpoint, "service_name": "from-the-config"},
        }
    )
    logging.basicConfig(level=logging.INFO, format=log_format(True), stream=sys.stderr)
    channel = SimpleNamespace(config=config, consumer_id="instance-1")
    with HttpSubscriber() as subscriber:
        dispatcher = LoggingDispatcher(subscriber.url, registry=CollectorRegistry(), retry={"count": 0})
        tracing = TracingAddOn()
        tracing.start(channel, dispatcher)  # type: ignore[arg-type]
        tracing.partitions_taken([(TOPIC, 3)])
        committed: list[int] = []  # the channel's part, which this run has no ZooKeeper for
        one = EventBatch([traced(40, *PRODUCER_1)])
        deliver_batch(dispatcher, PartitionSource(TOPIC, 3, 40, 40, 41, commit=committed.append), one, group=GROUP)
        three = EventBatch([traced(41, *PRODUCER_1), FakeMessage(42), traced(43, *PRODUCER_2)])
        deliver_batch(dispatcher, PartitionSource(TOPIC, 3, 41, 41, 44, commit=committed.append), three, group=GROUP)
        log.info("delivered %d requests", subscriber.count())
        tracing.partition_removed(SimpleNamespace(topic=TOPIC, partition=3, committed=44))  # type: ignore[arg-type]
        dispatcher.on_stop()
        tracing.stop()


if __name__ == "__main__":
    main(sys.argv[1])

"""Count orders per partition: a small BatchEventProcessor for ``jetkafka run``.

Each record's value is expected to be a JSON object such as ``{"order_id": 17, "amount": 12.5}``.
The processor counts the orders of every partition it handles and adds up their ``amount``;
a value that is not such an object is counted as malformed and skipped, never raised on
(raising would make the channel re-deliver the batch, forever with ``on_error.mode: retry``).

Run it against the local dev stack with ``examples/count_orders.yaml`` (see examples/README.md):

    jetkafka run examples/count_orders.yaml --pythonpath examples

Counts live in this process: after a rebalance, the partition's next owner counts from the
offset committed here. Every batch is committed after it was counted (``advance``), and a
released partition commits what it counted (``on_stream_termination`` returns ``advance``), so
a graceful stop or hand-over counts each order exactly once across instances; after a crash
the uncommitted batch in hand is counted again by the next owner.
"""

from __future__ import annotations

import json
import logging
import os
import threading

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource
from jetkafka.channel import ChannelContext

log = logging.getLogger("count_orders")

Key = tuple[str, int]


class OrderCounter(BatchEventProcessor):
    """Counts orders per partition; logs the counts and, with ``report``, writes them as JSON.

    Options (``processor.options`` in the YAML file):

    - ``report``: a file to write the final counts to when the channel stops; empty: none.
      The file holds ``{"partitions": {"<topic>[<partition>]": {"orders": n, "malformed": n,
      "amount": x}}, "orders": total, "malformed": total, "amount": total}``.
    - ``log_every``: log a partition's running count every this many orders (0: never).
    """

    def __init__(self, report: str = "", log_every: int | str = 0) -> None:
        self.report = report
        # Values from the environment arrive as strings; accept both.
        self.log_every = int(log_every)
        if self.log_every < 0:
            raise ValueError(f"log_every must be >= 0, got {self.log_every}")
        # One instance serves every partition of the channel, from several worker threads at
        # once (each partition on one thread at a time): state is keyed by partition and
        # guarded by a lock.
        self._lock = threading.Lock()
        self._orders: dict[Key, int] = {}
        self._malformed: dict[Key, int] = {}
        self._amount: dict[Key, float] = {}
        self._group = ""

    def on_start(self, context: ChannelContext) -> None:
        self._group = context.group
        log.info("counting orders for group %s as consumer %s", context.group, context.consumer_id)

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        orders = malformed = 0
        amount = 0.0
        for event in events:
            order = _parse(event.value)
            if order is None:
                malformed += 1
                log.warning("%s[%d]@%d: not an order, skipped", event.topic, event.partition, event.offset)
                continue
            orders += 1
            value = order.get("amount", 0)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                amount += value
        key = (source.topic, source.partition)
        with self._lock:
            before = self._orders.get(key, 0)
            total = before + orders
            self._orders[key] = total
            self._malformed[key] = self._malformed.get(key, 0) + malformed
            self._amount[key] = self._amount.get(key, 0.0) + amount
        if self.log_every and total // self.log_every > before // self.log_every:
            log.info("%s[%d]: %d orders so far", source.topic, source.partition, total)
        # Commit the offset after this batch: counted orders are never counted again after a
        # graceful stop or hand-over.
        return BatchResponse.advance()

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        key = (source.topic, source.partition)
        with self._lock:
            orders = self._orders.get(key, 0)
            malformed = self._malformed.get(key, 0)
        log.info(
            "%s[%d]: released at offset %d after counting %d orders (%d malformed)",
            source.topic,
            source.partition,
            source.next_offset,
            orders,
            malformed,
        )
        # Commit what was counted, so the next owner starts right after it.
        return BatchResponse.advance()

    def on_stop(self) -> None:
        summary = self.summary()
        for name, counts in summary["partitions"].items():
            log.info("final count %s: %d orders, %d malformed, amount %.2f", name, counts["orders"],
                     counts["malformed"], counts["amount"])
        log.info(
            "final count: %d orders (%d malformed) in %d partitions, amount %.2f",
            summary["orders"],
            summary["malformed"],
            len(summary["partitions"]),
            summary["amount"],
        )
        if self.report:
            tmp = f"{self.report}.tmp"
            with open(tmp, "w", encoding="utf-8") as out:
                json.dump(summary, out, indent=2, sort_keys=True)
                out.write("\n")
            os.replace(tmp, self.report)  # readers never see a half-written file
            log.info("counts written to %s", self.report)

    def summary(self) -> dict:
        """The counts so far: per partition and in total."""
        with self._lock:
            keys = sorted(set(self._orders) | set(self._malformed))
            partitions = {
                f"{topic}[{partition}]": {
                    "orders": self._orders.get((topic, partition), 0),
                    "malformed": self._malformed.get((topic, partition), 0),
                    "amount": round(self._amount.get((topic, partition), 0.0), 6),
                }
                for topic, partition in keys
            }
        return {
            "group": self._group,
            "partitions": partitions,
            "orders": sum(p["orders"] for p in partitions.values()),
            "malformed": sum(p["malformed"] for p in partitions.values()),
            "amount": round(sum(p["amount"] for p in partitions.values()), 6),
        }


def _parse(value: bytes | None) -> dict | None:
    """The order in ``value``, or None when it is not a JSON object with an ``order_id``."""
    if not value:
        return None
    try:
        order = json.loads(value)
    except ValueError:  # also UnicodeDecodeError
        return None
    if not isinstance(order, dict) or "order_id" not in order:
        return None
    return order

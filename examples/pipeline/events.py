"""Sample purchase events: JSON with an id, a user, an amount in cents and an event time.

The events are deterministic for a given seed, so a run can be checked against a pure-Python
computation over the same list.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Producer

EVENT_SCHEMA = "id STRING, user STRING, cents BIGINT, ts BIGINT"


def generate_events(count: int, *, start_ms: int = 1_717_200_000_000, span_minutes: int = 30, seed: int = 7,
                    users: int = 50) -> list[dict[str, Any]]:
    """``count`` events spread over ``span_minutes`` minutes of event time from ``start_ms``."""
    rng = random.Random(seed)
    span_ms = span_minutes * 60_000
    return [
        {
            "id": f"e{i:08d}",
            "user": f"u{rng.randrange(users):03d}",
            "cents": rng.randrange(100, 50_000),
            "ts": start_ms + rng.randrange(span_ms),
        }
        for i in range(count)
    ]


def encode(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def records(events: Iterable[dict[str, Any]], partitions: int) -> list[tuple[int, bytes, bytes]]:
    """``(partition, key, value)`` per event, keyed (and partitioned) by user."""
    out = []
    for event in events:
        user = event["user"]
        out.append((int(user[1:]) % partitions, user.encode(), encode(event)))
    return out


def produce_events(
    client_config: dict[str, Any],
    topic: str,
    events: list[dict[str, Any]],
    partitions: int,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write the events and wait for every delivery; returns how many landed."""
    producer = Producer({**client_config, "linger.ms": 20, "compression.type": "lz4"})
    delivered = 0
    failed: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failed.append(str(err))

    for i, (partition, key, value) in enumerate(records(events, partitions)):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
            if progress is not None:
                progress(delivered)
    left = producer.flush(120)
    if left or failed:
        raise RuntimeError(f"{left} events undelivered, {len(failed)} failed ({failed[:3]})")
    if progress is not None:
        progress(delivered)
    return delivered

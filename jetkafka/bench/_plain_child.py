"""A plain confluent-kafka consumer in a child process, the memory benchmark's baseline.

    python -m jetkafka.bench._plain_child --kafka CONFIG.json --topic T --partitions P --events N --out FILE

Assigns every partition from the beginning with librdkafka's defaults, reads ``N`` events
doing nothing with them, and appends ``start <rss>``, ``done <seconds>`` and ``peak <VmHWM>``
(bytes) to ``FILE``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kafka", required=True, help="JSON file of librdkafka properties")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from jetkafka.bench._processors import peak_rss_bytes, rss_bytes

    with open(args.kafka) as f:
        kafka = json.load(f)
    with open(args.out, "a") as f:
        f.write(f"start {rss_bytes()}\n")
    consumer = Consumer({**kafka, "group.id": f"plain-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in range(args.partitions)])
    count = 0
    started = 0.0
    while count < args.events:
        msgs = consumer.consume(num_messages=1000, timeout=1.0)
        if msgs and not started:
            started = time.perf_counter()
        for m in msgs:
            if m.error() is None:
                count += 1
    seconds = time.perf_counter() - started
    consumer.close()
    with open(args.out, "a") as f:
        f.write(f"done {seconds}\npeak {peak_rss_bytes()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

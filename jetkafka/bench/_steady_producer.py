"""The latency benchmark's producer, in a process of its own: the example's events at a steady rate.

    python -m jetkafka.bench._steady_producer --kafka CONFIG.json --topic T --partitions P \\
        --rate R --seconds S --out FILE

A process of its own so that producing does not compete with the measured channel for its
interpreter (the GIL), as a real producer would not. The events are the example pipeline's
JSON purchases (``examples/pipeline/events.py``'s ``encode``), keyed and partitioned by user,
with the event time set to the wall clock; librdkafka stamps each record's ``CreateTime`` when
``produce`` is called. The schedule is kept in 5 ms ticks for ``S`` seconds and never
extended: a producer that falls behind produces fewer records, and the achieved rate and the
largest lag behind the schedule say so. The result goes to ``FILE`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from typing import Any

log = logging.getLogger("jetkafka.bench")

TICK_S = 0.005  # the schedule's step
CHECK_EVERY = 200  # records produced between two looks at the clock while catching up
FELL_BEHIND = 0.97  # an achieved rate under this share of the target is reported as falling behind
USERS = 50  # as examples/pipeline/events.py's generate_events


def produce_steady(kafka: dict[str, Any], topic: str, partitions: int, rate: int, seconds: float,
                   encode: Any) -> dict[str, Any]:
    """Produce at ``rate`` per second for ``seconds``; what was produced, at what rate, how far behind."""
    from confluent_kafka import KafkaError, Producer

    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    producer = Producer({**kafka, "linger.ms": 5, "acks": 1, "logger": log})
    rng = random.Random(11)
    sent = 0
    behind = 0  # the most records the producer was behind its schedule, at a tick
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        due = int(elapsed * rate) + 1
        behind = max(behind, due - sent)
        while sent < due:
            if sent % CHECK_EVERY == 0 and time.perf_counter() - started >= seconds:
                break  # the window is over: catching up past it would stretch it
            user = f"u{rng.randrange(USERS):03d}"
            event = {"id": f"l{sent:09d}", "user": user, "cents": rng.randrange(100, 50_000),
                     "ts": int(time.time() * 1000)}
            while True:
                try:
                    producer.produce(topic, encode(event), user.encode(), partition=int(user[1:]) % partitions,
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += 1
        producer.poll(0)
        time.sleep(TICK_S)
    seconds_taken = time.perf_counter() - started
    left = producer.flush(60)
    if left or errors:
        raise RuntimeError(f"producing to {topic} failed: {left} unsent, errors: {'; '.join(errors) or '-'}")
    achieved = sent / seconds_taken
    return {
        "produced": sent,
        "seconds": seconds_taken,
        "events_per_s": achieved,
        "fell_behind": achieved < FELL_BEHIND * rate,
        "max_behind_s": behind / rate,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kafka", required=True, help="JSON file of librdkafka properties")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--rate", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from jetkafka.bench._spark_workload import load_example

    with open(args.kafka) as f:
        kafka = json.load(f)
    events, _ = load_example()
    result = produce_steady(kafka, args.topic, args.partitions, args.rate, args.seconds, events.encode)
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

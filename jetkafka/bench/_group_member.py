"""A Kafka consumer-group member for the hand-off comparison (a child process).

    python -m jetkafka.bench._group_member --bootstrap HOST:PORT --topic T --group G --out FILE

Subscribes with ``partition.assignment.strategy=cooperative-sticky`` and appends to ``FILE``
``pid partition offset time`` for the first record of each partition in every ``consume`` call
(the format of :class:`jetkafka.bench._processors.HandoffRecorder`), and ``#assign pid time p,p``
/ ``#revoke pid time p,p`` when the group coordinator moves partitions. SIGTERM closes the
consumer, which leaves the group (the graceful case); SIGKILL leaves it to the session timeout.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--heartbeat-ms", type=int, default=3_000)
    args = parser.parse_args(argv)

    from confluent_kafka import Consumer

    pid = os.getpid()
    fd = os.open(args.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def note(kind: str, partitions: list[Any]) -> None:
        ps = ",".join(str(p.partition) for p in partitions)
        os.write(fd, f"#{kind} {pid} {time.time():.6f} {ps}\n".encode())

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": args.heartbeat_ms,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    consumer.subscribe(
        [args.topic],
        on_assign=lambda c, ps: note("assign", ps),
        on_revoke=lambda c, ps: note("revoke", ps),
        on_lost=lambda c, ps: note("revoke", ps),
    )
    while not stop.is_set():
        msgs = consumer.consume(num_messages=500, timeout=0.1)
        if not msgs:
            continue
        now = time.time()
        seen: set[int] = set()
        lines = []
        for m in msgs:
            p = m.partition()
            if m.error() is not None or p is None:  # an error event, not a record
                continue
            if p not in seen:
                seen.add(p)
                lines.append(f"{pid} {p} {m.offset()} {now:.6f}\n")
        if lines:
            os.write(fd, "".join(lines).encode())
    consumer.close()  # leaves the group: its partitions are reassigned at once
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())

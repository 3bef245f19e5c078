"""An application that embeds jetkafka: its own processor, signals, hot deploy, a summary.

docs/embedding.md explains each part. Run it against the dev stack (examples/README.md):

    python examples/embedded_app.py examples/embedded_app.yaml --watch --report report.json

It consumes the topic of ``channel.topics`` until SIGTERM or SIGINT (Ctrl-C), then shuts the
channel down gracefully and exits 0, or 1 when ``channel.shutdown_timeout_s`` passed with
partitions still in hand (their uncommitted batches are re-read by the next owner). A second
SIGINT exits at once with 130, committing nothing more. SIGUSR1 pauses the channel and logs
once the batches in hand have ended; SIGUSR2 resumes it. A configuration, connection or topic
problem at start is printed as one line and exits 2.

``--batch-delay-s`` makes every batch take that long, to watch a pause wait for the batch in
hand, or a shutdown run out of time.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from types import FrameType
from typing import TypedDict

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, InboundChannel, JetkafkaError, PartitionSource
from jetkafka.ops import ChannelMetrics

log = logging.getLogger("embedded_app")

Key = tuple[str, int]


class Counts(TypedDict):
    events: int  # events processed, all partitions
    duplicates: int  # events whose offset had been processed before: 0 after a clean run
    partitions: dict[str, int]  # events per "topic[partition]"


class EventRecorder(BatchEventProcessor):
    """Counts the events of every partition and notices any offset delivered twice.

    One instance serves all partitions, from several worker threads at once (each partition on
    one thread at a time), so its state is guarded by a condition, which also lets
    :meth:`wait_idle` wait for the batches in hand to end.
    """

    def __init__(self, batch_delay_s: float = 0.0) -> None:
        self.batch_delay_s = batch_delay_s
        self._state = threading.Condition()
        self._events: Counter[Key] = Counter()
        self._seen: dict[Key, set[int]] = {}
        self._duplicates = 0
        self._in_hand = 0

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        key = (source.topic, source.partition)
        with self._state:
            self._in_hand += 1
        try:
            if self.batch_delay_s:
                time.sleep(self.batch_delay_s)  # stands for slow work
            with self._state:
                seen = self._seen.setdefault(key, set())
                for event in events:
                    if event.offset in seen:
                        self._duplicates += 1
                        log.warning("%s[%d]@%d: delivered again", event.topic, event.partition, event.offset)
                    seen.add(event.offset)
                self._events[key] += len(events)
        finally:
            with self._state:
                self._in_hand -= 1
                self._state.notify_all()
        return BatchResponse.advance()  # commit after this batch

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        log.info("%s[%d]: released at offset %d", source.topic, source.partition, source.next_offset)
        return BatchResponse.advance()  # commit what was processed before letting go

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no batch is in hand; False if one still is after ``timeout`` seconds."""
        with self._state:
            return self._state.wait_for(lambda: self._in_hand == 0, timeout)

    def summary(self) -> Counts:
        with self._state:
            return {
                "events": sum(self._events.values()),
                "duplicates": self._duplicates,
                "partitions": {f"{t}[{p}]": n for (t, p), n in sorted(self._events.items())},
            }


def log_progress(metrics: ChannelMetrics) -> None:
    """One INFO line from the channel's metrics view: partitions held, events, commits, lag."""
    view = metrics.view()
    lag = sum(
        max(0, p.watermarks[1] - p.committed)
        for p in view.partitions
        if p.watermarks is not None and p.committed is not None
    )
    log.info(
        "%d partitions held%s, %d events processed, %d commits, lag %d",
        len(view.partitions),
        " (paused)" if view.paused else "",
        sum(p.figures.events for p in view.partitions),
        view.commits,
        lag,
    )


def run_until_stopped(
    channel: InboundChannel, recorder: EventRecorder, stop: threading.Event, pause_wanted: list[bool], progress_s: float
) -> None:
    """Wait for ``stop`` on the main thread, pausing and resuming as asked and logging progress."""
    metrics = ChannelMetrics(channel)
    metrics.start()  # looks up watermarks in the background, for the lag in the progress lines
    try:
        next_progress = time.monotonic() + progress_s
        while not stop.wait(0.5):  # a short wait: Python runs signal handlers between waits
            while pause_wanted:
                if pause_wanted.pop(0):
                    channel.pause()  # returns before the batches in hand end
                    done = recorder.wait_idle(timeout=60)
                    log.info("paused; %s", "no batch in hand" if done else "a batch is still in hand")
                else:
                    channel.resume()
            if time.monotonic() >= next_progress:
                log_progress(metrics)
                next_progress += progress_s
        log.info("stopping: releasing the partitions")
    finally:
        metrics.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="the channel's YAML file")
    parser.add_argument("--watch", action="store_true", help="apply edits of the file while running (hot deploy)")
    parser.add_argument("--report", help="write the final counts and figures to this file as JSON")
    parser.add_argument("--batch-delay-s", type=float, default=0.0, help="make every batch take this long")
    parser.add_argument("--progress-s", type=float, default=10.0, help="seconds between progress lines")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s %(message)s")
    recorder = EventRecorder(args.batch_delay_s)
    try:
        channel = InboundChannel.from_yaml(args.config, processor=recorder)
    except JetkafkaError as exc:  # ConfigError: says which key is wrong and how to fix it
        print(exc, file=sys.stderr)
        return 2
    logging.getLogger().setLevel(channel.config.logging.level)

    # The handlers only set flags: the main thread does the work (shutdown() waits for the
    # workers, which a signal handler must not).
    stop = threading.Event()
    pause_wanted: list[bool] = []
    interrupts = 0

    def on_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        if signum == signal.SIGINT:
            interrupts += 1
            if interrupts > 1:  # asked twice: leave now, the next owners re-read what is uncommitted
                os.write(2, b"second interrupt: exiting without committing\n")
                os._exit(130)
        stop.set()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, lambda signum, frame: pause_wanted.append(True))
    signal.signal(signal.SIGUSR2, lambda signum, frame: pause_wanted.append(False))

    try:
        with channel:  # start() on entry (ConnectError, TopicNotFound), shutdown() on exit
            if args.watch:
                channel.watch()  # after start(); shutdown() stops it
            run_until_stopped(channel, recorder, stop, pause_wanted, args.progress_s)
    except JetkafkaError as exc:
        print(exc, file=sys.stderr)
        return 2
    clean = channel.shutdown_clean  # what the shutdown on leaving the with block returned

    counts = recorder.summary()
    stats = channel.stats.summary()
    summary = {**counts, "shutdown_clean": clean, "stats": stats}
    log.info(
        "final: %d events (%d delivered twice) in %d partitions; %s; shutdown %s",
        counts["events"],
        counts["duplicates"],
        len(counts["partitions"]),
        ", ".join(f"{name} {value}" for name, value in stats.items()),
        "clean" if clean else "timed out",
    )
    if args.report:
        tmp = f"{args.report}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=2, sort_keys=True)
        os.replace(tmp, args.report)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())

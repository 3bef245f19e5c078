"""The offset mirror as a lag tool sees it: Kafka's committed offsets of the mirror group, polled.

With ``channel.commit_to_kafka`` every member copies each commit that landed in ZooKeeper to
the group offsets of the mirror group (``jetkafka.<group>``). :class:`MirrorWatch` reads those
offsets the way ``kafka-consumer-groups --describe`` and Burrow do: an OffsetFetch of the group
(``Consumer.committed`` of a consumer that never subscribes, so it never joins the group and
never disturbs the members' commits). Not the admin API's ``list_consumer_group_offsets``:
librdkafka 2.16 aborts the whole process (``rd_kafka_enq_once_del_source_return: Assertion
eonce->refcnt > 0``) when the broker restarts under one of its requests. It polls every ``interval_s`` for the whole run on a thread of its own;
:meth:`MirrorWatch.final` stops the polls and reads once more, after every member stopped.

Each answer goes to ``mirror.tsv`` in the run directory (the format:
:func:`tests.soak.history.read_mirror`), stamped with the wall clock when the answer came: Kafka
held that offset at some moment before it. The checker judges the lines against ZooKeeper's
transaction log (:mod:`tests.soak.mirror`).

Failure modes: a poll that fails (the broker restarting, a coordinator loading) is written as an
``X`` line and the next one comes on time; the final read is tried until it succeeds or
``final_timeout_s`` passed, and :meth:`final` says which. Threads: the polls run on the watch's
thread; :meth:`final` and :meth:`close` on the harness's; the file is written by one of them at a
time (the thread is joined before the final read).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.soak.history import mirror_line

log = logging.getLogger("soak.mirror")

# A poll's answer must come within this: a broker that is down makes the polls fail, not pile up.
REQUEST_TIMEOUT_S = 1.0


class MirrorWatch:
    def __init__(
        self, kafka: dict[str, Any], group: str, topic: str, partitions: int, path: Path, interval_s: float = 0.1
    ) -> None:
        self.group = group
        # Never subscribed, never assigned: the group id only names the offsets it fetches.
        self._consumer = Consumer({**kafka, "group.id": group, "enable.auto.commit": False, "logger": log})
        self._partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self._interval_s = interval_s
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close(), after the thread
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-mirror-watch", daemon=True)
        self.polls = 0
        self.failed = 0

    def start(self) -> None:
        self._thread.start()

    def _read(self) -> dict[int, int]:
        """Kafka's committed offset of each partition that has one (one OffsetFetch)."""
        answer = self._consumer.committed(self._partitions, timeout=REQUEST_TIMEOUT_S)
        errors = [f"[{tp.partition}] {tp.error}" for tp in answer if tp.error is not None]
        if errors:
            raise RuntimeError("; ".join(errors))
        return {tp.partition: int(tp.offset) for tp in answer if tp.offset >= 0}

    def _poll(self, kind: str) -> bool:
        self.polls += 1
        try:
            offsets = self._read()
        except Exception as exc:  # noqa: BLE001 - any failure is a failed poll; the next one follows
            self.failed += 1
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            self._file.write(f"X\t{time.time():.6f}\t{reason}\n")
            return False
        at = time.time()
        self._file.writelines(mirror_line(kind, at, p, o) for p, o in sorted(offsets.items()))
        self._file.flush()
        return True

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            try:
                self._poll("O")
            except ValueError:  # the file closed under a poll that outlived close()'s wait
                return
            # On a fixed beat: a slow answer shortens the next wait instead of slowing the polls.
            due = max(due + self._interval_s, time.monotonic())
            self._stop.wait(due - time.monotonic())

    def final(self, final_timeout_s: float = 30.0) -> dict[str, Any]:
        """Stop polling and read once more (every member has stopped); what the watch did."""
        self._stop.set()
        self._thread.join(timeout=REQUEST_TIMEOUT_S * 3 + self._interval_s)
        deadline = time.monotonic() + final_timeout_s
        done = self._poll("F")
        while not done and time.monotonic() < deadline:
            time.sleep(0.5)
            done = self._poll("F")
        self._file.flush()
        return {"group": self.group, "polls": self.polls, "failed_polls": self.failed, "final_read": done}

    def close(self) -> None:
        """Stop the thread (if :meth:`final` did not) and close the file; idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=REQUEST_TIMEOUT_S * 3 + self._interval_s)
        if not self._file.closed:
            self._file.close()
            self._consumer.close()

"""The log-end watch: finds records waiting for a partition while the channel's budget is spent.

While the budget is spent the fetcher does not poll, and librdkafka, whose read-ahead queue is
shared by every partition, stops fetching once that queue is full: the high watermark the
fetching consumer last saw for a quiet partition then grows old, and a record produced to it
would wait unseen while another partition holds the budget. The watch asks the broker directly
(one ListOffsets request for every partition it is given, through the fetcher's idle metadata
consumer) and raises each buffer's ``log_end``; when one then has records waiting, it wakes the
fetcher (:meth:`BufferBudget.poke`), whose share check gives it room
(:mod:`jetkafka.channel._shares`).

It runs on a thread of its own so that a slow broker never holds up the fetcher's commands;
at most one request per :data:`INTERVAL_S`, and only while the fetcher asks. A failed look-up
is logged at DEBUG and tried again at the next request: the only cost of a miss is that a
quiet partition's records wait until the budget has room again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._partition import PartitionState
from jetkafka.events import Key

log = logging.getLogger("jetkafka.channel")

INTERVAL_S = 0.5
LOOK_UP_TIMEOUT_S = 2.0


class LogEndWatch:
    def __init__(self, high_watermarks: Callable[[list[Key], float], dict[Key, int]], budget: BufferBudget) -> None:
        self._high_watermarks = high_watermarks
        self._budget = budget
        self._lock = threading.Lock()
        self._wanted: list[PartitionState] = []
        self._asked = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.look_ups = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jetkafka-log-ends", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._asked.set()
        if self._thread is not None:
            self._thread.join(timeout=LOOK_UP_TIMEOUT_S + 1)

    def look_up(self, states: list[PartitionState]) -> None:
        """By the fetcher: look up these partitions' log ends (the newest request replaces an
        older one not yet served)."""
        if not states:
            return
        with self._lock:
            self._wanted = states
        self._asked.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._asked.wait()
            self._asked.clear()
            with self._lock:
                states, self._wanted = self._wanted, []
            if self._stop.is_set():
                return
            if states:
                self._serve(states)
                self._stop.wait(INTERVAL_S)

    def _serve(self, states: list[PartitionState]) -> None:
        try:
            ends = self._high_watermarks([s.key for s in states], LOOK_UP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a miss only delays a quiet partition until there is room
            log.debug("log-end look-up of %d partitions failed: %s", len(states), exc)
            return
        self.look_ups += 1
        waiting = False
        for state in states:
            end = ends.get(state.key)
            if end is None:
                continue
            state.buffer.note_log_end(end)
            waiting = waiting or end > state.buffer.fetch_next
        if waiting:
            self._budget.poke()

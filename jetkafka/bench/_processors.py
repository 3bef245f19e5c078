"""Processors the benchmarks run, in the benchmark's process or in ``jetkafka run`` children.

- :class:`CountingNoOp`: does nothing with the events and returns ``advance``; counts processed
  events and batches and notes the time of the first event and of the last batch.
- :class:`HandoffRecorder`: appends ``pid partition offset time`` for the first event of every
  batch to a file (``time`` is ``time.time()``; parent and children share the clock).
- :class:`MemoryProbe`: a no-op that writes its RSS at start and its peak RSS (VmHWM) at stop
  to a file.
"""

from __future__ import annotations

import os
import resource
import threading
import time

from jetkafka.events import EventBatch, PartitionSource
from jetkafka.processors._base import BatchEventProcessor, BatchResponse

_ADVANCE = BatchResponse.advance()


class CountingNoOp(BatchEventProcessor):
    """No work per event; ``done`` is set once ``target`` events were processed.

    Commits may still be travelling then (``channel.pipelined_commits``): the throughput
    benchmark also waits for them to land.
    """

    def __init__(self, target: int = 0) -> None:
        self.target = target
        self.events = 0
        self.batches = 0
        self.first: float | None = None
        self.last: float | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if self.first is None:
            now = time.perf_counter()
            with self._lock:
                if self.first is None:
                    self.first = now
        return _ADVANCE

    def on_batch_processed(self, source: PartitionSource) -> None:
        # Called once the response was applied: the commit of advance() is sent, maybe not landed.
        n = source.next_offset - source.head_offset
        with self._lock:
            self.events += n
            self.batches += 1
            if self.target and self.events >= self.target and not self.done.is_set():
                self.last = time.perf_counter()
                self.done.set()


class HandoffRecorder(BatchEventProcessor):
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pid = os.getpid()

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        os.write(self._fd, f"{self._pid} {source.partition} {source.head_offset} {time.time():.6f}\n".encode())
        return _ADVANCE

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        return _ADVANCE

    def on_stop(self) -> None:
        os.close(self._fd)


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def peak_rss_bytes() -> int:
    """This process's peak RSS since it was exec'd.

    Linux: VmHWM of /proc/self/status. Not ru_maxrss, which after fork + exec still counts the
    parent's RSS at the fork.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return int(peak if os.uname().sysname == "Darwin" else peak * 1024)


class MemoryProbe(BatchEventProcessor):
    def __init__(self, path: str) -> None:
        self._path = path
        self._write("start", rss_bytes())

    def _write(self, what: str, value: int) -> None:
        with open(self._path, "a") as f:
            f.write(f"{what} {value}\n")

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        return _ADVANCE

    def on_stop(self) -> None:
        self._write("peak", peak_rss_bytes())

"""What a set of child processes costs the machine, summed over the set (psutil, Linux and macOS).

- memory: resident set size (RSS) and proportional set size (PSS: each shared page divided
  among the processes that map it; Linux only, else None). Summed RSS counts the pages every
  process maps from the same files (the interpreter, librdkafka) once per process; summed PSS
  counts them once in all.
- CPU: user + system seconds of each process and of its waited-for children.
- threads, and established TCP connections to given ports (ZooKeeper's, the brokers').

A process that exited between two readings counts as zero from then on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence
from typing import Any


class ProcessSet:
    """Readings summed over the processes ``pids``."""

    def __init__(self, pids: Sequence[int]) -> None:
        import psutil

        self._procs = [psutil.Process(pid) for pid in pids]
        self.peak_rss = 0

    def _each(self, read: Any) -> list[Any]:
        import psutil

        out = []
        for proc in self._procs:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                out.append(read(proc))
        return out

    def rss(self) -> int:
        """The summed RSS now, bytes; the peak over every call is kept in ``peak_rss``."""
        total = int(sum(self._each(lambda p: int(p.memory_info().rss))))
        self.peak_rss = max(self.peak_rss, total)
        return total

    def pss(self) -> int | None:
        """The summed PSS now, bytes; None where the platform does not tell it."""
        values = self._each(lambda p: getattr(p.memory_full_info(), "pss", None))
        if not values or any(v is None for v in values):
            return None
        return int(sum(values))

    def cpu_seconds(self) -> float:
        def used(p: Any) -> float:
            t = p.cpu_times()
            return float(t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0))

        return float(sum(self._each(used)))

    def threads(self) -> int:
        return int(sum(self._each(lambda p: p.num_threads())))

    def connections(self, ports: Collection[int]) -> int:
        """Established TCP connections from these processes to any of ``ports``."""
        import psutil

        def count(p: Any) -> int:
            return sum(
                1
                for c in p.net_connections(kind="tcp")
                if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port in ports
            )

        return int(sum(self._each(count)))

"""The CPU time a thread of this process has used, read from Linux's per-thread CPU clock.

Guarantee: :func:`thread_cpu_seconds` returns the seconds of CPU (user and system) the thread
with the given native id (:attr:`threading.Thread.native_id`, the kernel's tid) has used since
it started, or ``None`` when that cannot be known: the thread has exited (the kernel answers
EINVAL), the id is ``None`` (a thread not started yet), or the platform has no such clock.

How: Linux encodes a thread's CPU clock in a clock id, ``((~tid) << 3) | 6``
(``CPUCLOCK_PERTHREAD`` with ``CPUCLOCK_SCHED``), which :func:`time.clock_gettime` reads. It is
the clock glibc's ``pthread_getcpuclockid`` returns, but keyed by the tid rather than by a
``pthread_t``: a ``pthread_t`` of an exited thread points at freed memory (undefined behaviour),
whereas an exited tid is only an error. The kernel accepts only tids of this process, so a
reused tid of another process is an error too, never another process's figure.

Cost: one system call, about a microsecond.
"""

from __future__ import annotations

import sys
import time

__all__ = ["clock_id", "thread_cpu_seconds"]

_HAS_THREAD_CLOCKS = sys.platform.startswith("linux") and hasattr(time, "clock_gettime")


def clock_id(native_id: int) -> int:
    """The clock id of the CPU clock of the thread whose kernel tid is ``native_id``."""
    return ((~native_id) << 3) | 6


def thread_cpu_seconds(native_id: int | None) -> float | None:
    """Seconds of CPU used by the thread ``native_id`` of this process; ``None`` when unknown."""
    if native_id is None or not _HAS_THREAD_CLOCKS:
        return None
    try:
        return time.clock_gettime(clock_id(native_id))
    except OSError:  # EINVAL: the thread has exited (or the id is not one of this process)
        return None
